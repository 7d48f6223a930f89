"""`rollout serve --openai-port 0` as a real process: the official client chats with it, token required,
over HTTPS with the gRPC server's certificate, under the served model names."""

from __future__ import annotations

import shutil
import ssl
import time
from pathlib import Path

import httpx
import openai
import pytest

from rollout.client import RolloutClient
from tests.builders import tiny_model
from tests.openai.openai_builders import hermes_tokenizer
from tests.serve_process import announced_address, log_tail, start_serve, stop_server
from tests.server.test_tls import _self_signed

OPENAI_ANNOUNCEMENT = "rollout openai api on "  # rollout/commands/serve.py


def openai_base_url(log_path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith(OPENAI_ANNOUNCEMENT):
                return line.removeprefix(OPENAI_ANNOUNCEMENT).strip()
        time.sleep(0.05)
    raise AssertionError(f"no OpenAI address announced: {log_tail(log_path)}")


@pytest.mark.slow
def test_rollout_serve_answers_the_openai_client_on_the_same_engine_with_the_same_token(
    tmp_path: Path,
) -> None:
    tiny_model("llama").save_pretrained(tmp_path / "model")
    hermes_tokenizer().save_pretrained(tmp_path / "model")
    log = tmp_path / "serve.log"
    args = ["--model", str(tmp_path / "model"), "--port", "0", "--openai-port", "0", "--token", "s3cret"]
    process = start_serve(args, log)
    try:
        announced_address(process, log)
        base_url = openai_base_url(log)
        client = openai.OpenAI(base_url=base_url, api_key="s3cret")
        model = client.models.list().data[0].id
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4, logprobs=True
        )
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base_url, api_key="wrong").models.list()
    finally:
        stop_server(process)
    assert len(reply.choices[0].logprobs.content) == len(reply.choices[0].model_extra["token_ids"])
    assert reply.choices[0].model_extra["weight_version"] == 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a certificate")
def test_rollout_serve_with_tls_serves_https_under_the_served_model_names(tmp_path: Path) -> None:
    """One --tls-cert/--tls-key pair encrypts both front ends; the API answers to --served-model-name."""
    tiny_model("llama").save_pretrained(tmp_path / "model")
    hermes_tokenizer().save_pretrained(tmp_path / "model")
    cert, key = _self_signed(tmp_path)
    log = tmp_path / "serve.log"
    args = ["--model", str(tmp_path / "model"), "--port", "0", "--openai-port", "0"]
    args += ["--tls-cert", str(cert), "--tls-key", str(key), "--served-model-name", "policy", "p"]
    process = start_serve(args, log)
    try:
        address = announced_address(process, log)
        base_url = openai_base_url(log)
        trusting = httpx.Client(verify=ssl.create_default_context(cafile=str(cert)))
        client = openai.OpenAI(base_url=base_url, api_key="none", http_client=trusting)
        names = [m.id for m in client.models.list().data]
        reply = client.completions.create(model="p", prompt=[5, 6], max_tokens=2)
        with RolloutClient(address, tls=cert) as grpc_client:
            grpc_model = grpc_client.server_info().model
    finally:
        stop_server(process)
    assert base_url.startswith("https://") and names == ["policy", "p"] and reply.model == "policy"
    assert grpc_model == str(tmp_path / "model")
