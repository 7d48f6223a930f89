"""Every OpenAI reply that returns logprobs states what they hold (`logprobs_mode`, vLLM's names), through the
official client against a real server: chat and completions choices and every streamed chunk that carries
logprobs, and the Responses API's Response (streamed and not). The request's mode wins (an alias becomes
vLLM's name), else the server's `--logprobs-mode`; a reply without logprobs has no such field."""

from __future__ import annotations

import openai
import pytest

from tests.openai.openai_builders import chat_engine, openai_serving

MODEL = "LlamaForCausalLM"  # the served name of a model loaded as an object
SERVER_MODE = "raw_logits"
BASE = {"model": MODEL, "max_tokens": 6, "temperature": 1.0, "seed": 3}
CASES = [(None, SERVER_MODE), ("processed", "processed_logprobs"), ("raw_logprobs", "raw_logprobs")]
MESSAGES = [{"role": "user", "content": "weather?"}]


def _client(http: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)


def _body(mode: str | None) -> dict:
    return {"extra_body": {"ignore_eos": True, **({"logprobs_mode": mode} if mode else {})}}


@pytest.fixture(scope="module")
def http():
    with openai_serving(chat_engine(logprobs_mode=SERVER_MODE)) as (_, server):
        yield server


@pytest.mark.parametrize(("mode", "expected"), CASES)
def test_chat_choices_and_every_chunk_with_logprobs_state_the_mode(
    http, mode: str | None, expected: str
) -> None:
    client = _client(http)
    whole = client.chat.completions.create(
        messages=MESSAGES, logprobs=True, top_logprobs=2, **BASE, **_body(mode)
    )
    assert whole.choices[0].model_extra["logprobs_mode"] == expected
    assert len(whole.choices[0].logprobs.content) == 6
    chunks = list(
        client.chat.completions.create(messages=MESSAGES, logprobs=True, stream=True, **BASE, **_body(mode))
    )
    with_logprobs = [c.choices[0] for c in chunks if c.choices and c.choices[0].logprobs is not None]
    assert sum(len(c.logprobs.content) for c in with_logprobs) == 6
    assert {c.model_extra["logprobs_mode"] for c in with_logprobs} == {expected}


@pytest.mark.parametrize(("mode", "expected"), CASES)
def test_completion_choices_and_chunks_state_the_mode(http, mode: str | None, expected: str) -> None:
    client = _client(http)
    whole = client.completions.create(prompt="weather", logprobs=2, **BASE, **_body(mode))
    assert whole.choices[0].model_extra["logprobs_mode"] == expected
    chunks = list(client.completions.create(prompt="weather", logprobs=0, stream=True, **BASE, **_body(mode)))
    with_logprobs = [c.choices[0] for c in chunks if c.choices and c.choices[0].logprobs is not None]
    assert with_logprobs and {c.model_extra["logprobs_mode"] for c in with_logprobs} == {expected}


@pytest.mark.parametrize(("mode", "expected"), CASES)
def test_a_response_with_logprobs_states_the_mode_streamed_or_not(
    http, mode: str | None, expected: str
) -> None:
    client = _client(http)
    kwargs = {
        "model": MODEL,
        "input": "weather?",
        "max_output_tokens": 6,
        "include": ["message.output_text.logprobs"],
    }
    whole = client.responses.create(**kwargs, **_body(mode))
    assert whole.model_extra["logprobs_mode"] == expected and len(whole.model_extra["token_logprobs"]) == 6
    events = list(client.responses.create(**kwargs, stream=True, **_body(mode)))
    assert events[-1].response.model_extra["logprobs_mode"] == expected


def test_replies_without_logprobs_have_no_mode(http) -> None:
    client = _client(http)
    chat = client.chat.completions.create(messages=MESSAGES, **BASE)
    completion = client.completions.create(prompt="weather", **BASE)
    response = client.responses.create(model=MODEL, input="weather?", max_output_tokens=6)
    assert "logprobs_mode" not in chat.choices[0].model_extra
    assert "logprobs_mode" not in completion.choices[0].model_extra
    assert "logprobs_mode" not in response.model_extra
