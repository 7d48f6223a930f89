"""HTTPS on the OpenAI port: the gRPC server's certificate and key, the official client trusting it."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import httpx
import openai
import pytest

from rollout.openai.server import OpenAIServer
from rollout.server.app import ServerTLS
from rollout.server.engine_loop import EngineLoop
from tests.openai.openai_builders import chat_engine, openai_serving
from tests.server.test_tls import _self_signed

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="needs openssl to make a certificate"
)
CHAT = {"model": "LlamaForCausalLM", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@needs_openssl
def test_the_openai_client_trusting_the_certificate_chats_over_https(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    with openai_serving(tls=ServerTLS(cert, key), token="s3cret") as (_, http):
        trusting = httpx.Client(verify=ssl.create_default_context(cafile=str(cert)))
        client = openai.OpenAI(base_url=http.base_url, api_key="s3cret", http_client=trusting)
        reply = client.chat.completions.create(**CHAT, extra_body={"ignore_eos": True})
    assert http.base_url.startswith("https://127.0.0.1:")
    assert len(reply.choices[0].model_extra["token_ids"]) == 3


@needs_openssl
def test_plain_http_and_untrusting_clients_get_no_answer(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    with openai_serving(tls=ServerTLS(cert, key)) as (_, http):
        plain_url = http.base_url.replace("https://", "http://")
        with pytest.raises(httpx.HTTPError):  # uvicorn drops a plaintext request on a TLS socket
            httpx.get(f"{plain_url}/models", timeout=10).raise_for_status()
        with pytest.raises(openai.APIConnectionError):  # the default trust store lacks the self-signed cert
            openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0).models.list()


def test_a_certificate_that_does_not_load_is_refused_before_serving(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate")
    (tmp_path / "key.pem").write_text("not a key")
    with pytest.raises(ssl.SSLError):
        OpenAIServer(EngineLoop(chat_engine()), tls=ServerTLS(tmp_path / "cert.pem", tmp_path / "key.pem"))
