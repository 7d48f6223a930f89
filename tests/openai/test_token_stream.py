"""`stream: true` token by token, through the official `openai` client against a real server:
deltas join to the non-streamed reply (text, logprobs, token ids), stop strings never leak, n
choices interleave, and the first text arrives while the request still runs."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import openai
import pytest

from rollout.engine.llm_engine import LLMEngine
from tests.openai.openai_builders import chat_engine, openai_serving
from tests.server.server_builders import slow_steps

MESSAGES = [{"role": "user", "content": "weather in Paris?"}]
CHAT = dict(model="LlamaForCausalLM", messages=MESSAGES, max_tokens=12, seed=5)
STEP_S = 0.05  # slowed steps: each step's tokens reach the client before the next step samples


def client_of(http: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=http.base_url, api_key="none")


def deltas(chunks: list, index: int = 0) -> list[str]:
    return [
        c.delta.content for chunk in chunks for c in chunk.choices if c.index == index and c.delta.content
    ]


def gated_steps(engine: LLMEngine, open_steps: int) -> threading.Event:
    """After `open_steps` steps every step waits for the returned event (60 s at most)."""
    release, count, step = threading.Event(), itertools.count(), engine.step

    def gated() -> list:
        if next(count) >= open_steps:
            release.wait(60)
        return step()

    engine.step = gated
    return release


def test_a_streamed_chat_sends_several_text_chunks_that_join_to_the_unstreamed_content() -> None:
    engine = chat_engine()
    slow_steps(engine, STEP_S)
    with openai_serving(engine) as (_, http):
        whole = client_of(http).chat.completions.create(**CHAT)
        chunks = list(client_of(http).chat.completions.create(**CHAT, stream=True))
    assert len(deltas(chunks)) >= 4
    assert "".join(deltas(chunks)) == whole.choices[0].message.content


def test_the_first_text_chunk_arrives_while_the_request_still_runs() -> None:
    engine = chat_engine()
    release = gated_steps(engine, open_steps=4)
    with openai_serving(engine) as (_, http):
        try:
            stream = client_of(http).chat.completions.create(**CHAT, stream=True)
            first = next(chunk for chunk in stream if deltas([chunk]))
            running = engine.num_unfinished_requests
        finally:
            release.set()
        last = list(stream)[-1]
    assert first.choices[0].finish_reason is None and running == 1
    assert last.choices[0].finish_reason == "length"


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streamed_logprobs_join_to_the_unstreamed_ones(endpoint: str) -> None:
    engine = chat_engine()
    slow_steps(engine, STEP_S)
    with openai_serving(engine) as (_, http):
        client = client_of(http)
        if endpoint == "chat":
            args = CHAT | {"logprobs": True, "top_logprobs": 2}
            whole = client.chat.completions.create(**args).choices[0].logprobs.model_dump()
            chunks = list(client.chat.completions.create(**args, stream=True))
            entries = [e for chunk in chunks for c in chunk.choices if c.logprobs for e in c.logprobs.content]
            assert len([c for c in chunks if c.choices and c.choices[0].logprobs]) >= 4
            assert [e.model_dump() for e in entries] == whole["content"]
            return
        args = dict(model="LlamaForCausalLM", prompt="hello", max_tokens=12, seed=5, logprobs=2)
        whole = client.completions.create(**args).choices[0].logprobs.model_dump()
        parts = [c.choices[0].logprobs.model_dump() for c in client.completions.create(**args, stream=True)]
    assert len(parts) >= 4
    assert {key: sum((p[key] for p in parts), []) for key in whole} == whole


def test_a_stop_string_never_reaches_the_stream() -> None:
    engine = chat_engine()
    slow_steps(engine, STEP_S)
    with openai_serving(engine) as (_, http):
        client = client_of(http)
        free = client.chat.completions.create(**CHAT).choices[0].message.content
        stop = free[3:5]
        whole = client.chat.completions.create(**CHAT, stop=[stop]).choices[0]
        chunks = list(client.chat.completions.create(**CHAT, stop=[stop], stream=True))
    assert whole.message.content == free[: free.index(stop)] and whole.finish_reason == "stop"
    assert "".join(deltas(chunks)) == whole.message.content
    assert [c.finish_reason for chunk in chunks for c in chunk.choices if c.finish_reason] == ["stop"]


def test_two_choices_interleave_and_each_joins_to_its_own_content() -> None:
    engine = chat_engine()
    slow_steps(engine, STEP_S)
    args = CHAT | {"n": 2, "extra_body": {"ignore_eos": True}}
    with openai_serving(engine) as (_, http):
        whole = client_of(http).chat.completions.create(**args)
        chunks = list(client_of(http).chat.completions.create(**args, stream=True))
    order = [c.index for chunk in chunks for c in chunk.choices if c.delta.content]
    assert order[:4] in ([0, 1, 0, 1], [1, 0, 1, 0])  # both sample in every step
    for choice in whole.choices:
        assert "".join(deltas(chunks, choice.index)) == choice.message.content


def test_only_the_first_chunk_carries_the_prompt_token_ids() -> None:
    with openai_serving() as (_, http):
        whole = client_of(http).chat.completions.create(**CHAT)
        chunks = list(client_of(http).chat.completions.create(**CHAT, stream=True))
    assert chunks[0].model_extra["prompt_token_ids"] == whole.model_extra["prompt_token_ids"]
    assert len(chunks) > 2 and not any("prompt_token_ids" in c.model_extra for c in chunks[1:])


def test_only_the_final_chunk_of_each_choice_carries_token_ids_and_weight_versions() -> None:
    args = dict(model="LlamaForCausalLM", prompt=["hello", "bye"], max_tokens=8, seed=2, n=2)
    with openai_serving() as (_, http):
        whole = client_of(http).completions.create(**args)
        chunks = list(client_of(http).completions.create(**args, stream=True))
    choices = [c for chunk in chunks for c in chunk.choices]
    final = {c.index: c.model_extra for c in choices if c.finish_reason}
    assert not any("token_ids" in c.model_extra for c in choices if not c.finish_reason)
    for choice in whole.choices:
        for field in ("token_ids", "weight_version", "weight_versions"):
            assert final[choice.index][field] == choice.model_extra[field]
        assert "".join(c.text for c in choices if c.index == choice.index) == choice.text
