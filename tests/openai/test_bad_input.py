"""Bad input over HTTP: a clear 4xx, and nothing else affected; a dropped stream aborts its request."""

from __future__ import annotations

import httpx
import openai
import pytest

from rollout.openai.server import OpenAIServer
from rollout.server.engine_loop import EngineLoop
from rollout.server.metrics import Metrics
from tests.openai.openai_builders import chat_engine, openai_serving
from tests.server.server_builders import slow_steps, wait_for

CHAT = {"model": "LlamaForCausalLM", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_bad_json_is_400_and_the_server_keeps_serving() -> None:
    with openai_serving() as (_, http):
        bad = httpx.post(
            f"{http.base_url}/chat/completions",
            content=b'{"model": ',
            headers={"content-type": "application/json"},
        )
        good = httpx.post(f"{http.base_url}/chat/completions", json=CHAT)
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert good.status_code == 200


def test_an_unknown_field_is_refused_as_openai_does() -> None:
    with openai_serving() as (_, http):
        reply = httpx.post(f"{http.base_url}/chat/completions", json={**CHAT, "temprature": 0.5})
    assert reply.status_code == 400
    assert reply.json()["error"]["message"] == "Unrecognized request argument supplied: temprature"


def test_an_invalid_value_is_400_naming_the_field() -> None:
    with openai_serving() as (_, http):
        reply = httpx.post(f"{http.base_url}/chat/completions", json={**CHAT, "top_p": 2.0})
    assert reply.status_code == 400 and "top_p" in reply.json()["error"]["message"]
    assert reply.json()["error"]["param"] == "top_p"  # the field, not the whole message


def test_an_oversized_body_is_413_before_it_is_parsed() -> None:
    with openai_serving(max_body_bytes=1000) as (_, http):
        big = {**CHAT, "messages": [{"role": "user", "content": "a" * 2000}]}
        reply = httpx.post(f"{http.base_url}/chat/completions", json=big)
        chunked = httpx.post(f"{http.base_url}/chat/completions", content=iter([b"{" + b" " * 1500, b"}"]))
        assert httpx.post(f"{http.base_url}/chat/completions", json=CHAT).status_code == 200
    assert reply.status_code == 413 and chunked.status_code == 413


def test_a_stream_the_client_drops_aborts_its_request() -> None:
    engine = chat_engine()
    finished = slow_steps(
        engine, delay=0.05
    )  # 400 steps: 20 s for the drop to be seen, on a loaded machine too
    with openai_serving(engine) as (grpc_server, http):
        body = {**CHAT, "max_tokens": 400, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", f"{http.base_url}/chat/completions", json=body) as stream:
            next(stream.iter_bytes())  # the opening chunk: the request is in the engine
            wait_for(lambda: grpc_server.loop.stats()["num_requests_unfinished"] == 1, what="admission")
        wait_for(lambda: grpc_server.loop.stats()["num_requests_unfinished"] == 0, what="the abort")
        after = openai.OpenAI(base_url=http.base_url, api_key="none").chat.completions.create(**CHAT)
    assert [s.finish_reason for samples in finished.values() for s in samples][0] == "abort"
    assert len(after.choices[0].model_extra["token_ids"]) <= 2


def test_an_empty_token_is_refused_when_the_front_end_is_built() -> None:
    """It meant no auth at all: every route open."""
    loop = EngineLoop(chat_engine())
    with pytest.raises(ValueError, match="^token: empty"):
        OpenAIServer(loop, Metrics(loop), token="")
