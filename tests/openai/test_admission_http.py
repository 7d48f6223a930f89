"""The HTTP front end's admission: open requests bounded and shared fairly by callers (429 with Retry-After
past a caller's share, another caller served at once), and calls too large to admit refused before any
prompt is tokenized."""

from __future__ import annotations

import contextlib
import time

import httpx

import rollout.openai.requests.prepare
from tests.openai.openai_builders import chat_engine, openai_serving
from tests.server.server_builders import slow_steps, wait_for

MODEL = "LlamaForCausalLM"
LONG = {"model": MODEL, "prompt": "abc", "max_tokens": 400, "ignore_eos": True, "stream": True}
SHORT = {"model": MODEL, "prompt": "abc", "max_tokens": 4}


def test_a_caller_past_its_share_gets_429_with_retry_after_and_another_caller_is_served_at_once() -> None:
    """With 320 open streams another client's 4-token request waited 31 s (every worker thread was taken)."""
    engine = chat_engine(max_num_seqs=16)
    slow_steps(engine, delay=0.05)  # 400 steps: the streams stay open for the whole test
    with (
        openai_serving(engine, max_open_requests=8) as (grpc_server, http),
        httpx.Client(base_url=http.base_url, timeout=120) as client,
        contextlib.ExitStack() as streams,
    ):
        hog = {"x-rollout-caller": "hog"}
        for _ in range(7):  # 8 less the reserve of 8 // 8 kept for other callers
            stream = streams.enter_context(client.stream("POST", "/completions", json=LONG, headers=hog))
            assert stream.status_code == 200
        wait_for(lambda: grpc_server.loop.stats()["num_requests_unfinished"] == 7, what="the hog's streams")
        refused = client.post("/completions", json=SHORT, headers=hog)
        started = time.monotonic()
        served = client.post("/completions", json=SHORT, headers={"x-rollout-caller": "agent"})
        waited = time.monotonic() - started
        assert grpc_server.loop.stats()["num_requests_unfinished"] == 7  # the hog's streams still run
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "its share" in refused.json()["error"]["message"]
    assert served.status_code == 200 and len(served.json()["choices"][0]["token_ids"]) == 4
    assert waited < 30  # a hang guard: served beside the streams, not after them (400 steps of 0.05 s)


def test_requests_without_a_caller_name_share_their_host_and_the_bound_holds_for_them() -> None:
    engine = chat_engine(max_num_seqs=16)
    slow_steps(engine, delay=0.05)
    with (
        openai_serving(engine, max_open_requests=2) as (_, http),
        httpx.Client(base_url=http.base_url, timeout=120) as client,
        contextlib.ExitStack() as streams,
    ):
        for _ in range(2):  # a capacity of 2 keeps no reserve: one caller may hold both
            assert streams.enter_context(client.stream("POST", "/completions", json=LONG)).status_code == 200
        refused = client.post("/completions", json=SHORT)
    assert refused.status_code == 429 and "2 open requests: the server's limit" in refused.text
    assert refused.headers["retry-after"] == "1"


def test_more_prompts_than_the_server_admits_are_refused_before_any_is_tokenized(monkeypatch) -> None:
    """100,000 prompts in one completions call were refused only after 51 s of tokenizing."""
    tokenized: list[str] = []
    real = rollout.openai.requests.prepare.tokenize_text
    monkeypatch.setattr(
        rollout.openai.requests.prepare,
        "tokenize_text",
        lambda *a, **k: tokenized.append(a[1]) or real(*a, **k),
    )
    with openai_serving() as (grpc_server, http):
        limit = grpc_server.loop.max_pending_requests
        body = {"model": MODEL, "prompt": ["abc"] * 100_000, "max_tokens": 1}
        reply = httpx.post(f"{http.base_url}/completions", json=body, timeout=120)
        small = httpx.post(f"{http.base_url}/completions", json={**body, "prompt": ["abc"] * 3})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "prompt"
    message = reply.json()["error"]["message"]
    assert message == (
        f"prompt: the call has 100000 new prompts, more than the server admits at once "
        f"(max_pending_requests {limit}); split it into smaller calls"
    )
    assert tokenized == ["abc"] * 3 and small.status_code == 200
