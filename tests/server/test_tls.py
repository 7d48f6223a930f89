"""TLS: a client that trusts the server's certificate gets answers; a plaintext client does not."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.server.app import ServerTLS
from tests.server.server_builders import serving


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_tls_server_answers_a_client_trusting_its_certificate(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    with serving(tls=ServerTLS(cert, key)) as server:
        with RolloutClient(server.address, tls=cert) as client:
            assert len(client.generate([[5, 6]], SamplingParams(max_tokens=3))[0].outputs[0].token_ids) == 3
        with RolloutClient(server.address, max_retries=0, timeout=5) as plain, pytest.raises(grpc.RpcError):
            plain.server_info()
