"""The TRL plugin reaches a server that requires TLS and a bearer token (RolloutConfig.tls, .token)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("trl")

from rollout.server.app import ServerTLS  # noqa: E402
from tests.server.server_builders import serving  # noqa: E402
from tests.server.test_tls import _self_signed  # noqa: E402
from trainer_plugins.trl import RolloutConfig, server_checks  # noqa: E402


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_connect_uses_the_configured_certificate_and_token(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    with serving(tls=ServerTLS(cert, key), token="s3cret") as server:
        config = RolloutConfig(server=server.address, token="s3cret", tls=str(cert), wait_timeout=30)
        with server_checks.connect(config) as client:
            assert client.server_info().weight_version == 0
        plaintext = RolloutConfig(server=server.address, token="s3cret", wait_timeout=2)
        with pytest.raises(server_checks.RolloutServerUnavailable):
            server_checks.connect(plaintext)
