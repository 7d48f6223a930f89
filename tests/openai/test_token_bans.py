"""vLLM's `allowed_token_ids` and `bad_words` (and rollout's `bad_words_token_ids`) through the official
client: the sampled tokens respect them, and a bad value is 400 naming the field before the engine."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.builders import VOCAB
from tests.openai.openai_builders import hermes_tokenizer, openai_serving

ARGS = {"model": "LlamaForCausalLM", "prompt": [5, 6, 7], "max_tokens": 24, "n": 4, "seed": 1}


def sampled(client: openai.OpenAI, **extra: object) -> list[list[int]]:
    body = {"ignore_eos": True, **extra}
    reply = client.completions.create(**ARGS, temperature=1.0, extra_body=body)
    return [choice.model_extra["token_ids"] for choice in reply.choices]


def contains(ids: list[int], word: list[int]) -> bool:
    return any(ids[i : i + len(word)] == word for i in range(len(ids) - len(word) + 1))


def test_allowed_token_ids_bound_every_sampled_token() -> None:
    allowed = [10, 11, 12]
    with openai_serving() as (_, http):
        samples = sampled(openai.OpenAI(base_url=http.base_url, api_key="none"), allowed_token_ids=allowed)
    assert all(set(ids) <= set(allowed) for ids in samples)
    assert len({t for ids in samples for t in ids}) > 1  # sampled among them, not pinned to one


def test_bad_words_never_appear_in_the_sampled_text() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        free = sampled(client)
        word = free[0][3:5]  # two tokens the model samples without the ban
        text = hermes_tokenizer().decode(word)
        banned = sampled(client, bad_words=[text])
    assert len(text) == 2 and contains(free[0], word)
    assert not any(contains(ids, word) for ids in banned)


def test_bad_words_token_ids_never_appear_in_the_sampled_tokens() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        free = sampled(client)
        words = [free[0][2:4], [free[1][0]]]
        banned = sampled(client, bad_words_token_ids=words)
    assert not any(contains(ids, word) for ids in banned for word in words)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("allowed_token_ids", [VOCAB + 5]),
        ("allowed_token_ids", [-1]),
        ("allowed_token_ids", []),
        ("allowed_token_ids", "abc"),
        ("bad_words", "abc"),
        ("bad_words", [""]),
        ("bad_words_token_ids", [[VOCAB]]),
        ("bad_words_token_ids", [[]]),
    ],
)
def test_a_bad_value_is_400_naming_the_field_and_never_reaches_the_engine(field: str, value: object) -> None:
    with openai_serving() as (grpc_server, http):
        body = {"model": "LlamaForCausalLM", "prompt": [5, 6], "max_tokens": 2, field: value}
        reply = httpx.post(f"{http.base_url}/completions", json=body)
        stats = grpc_server.loop.stats()
    assert reply.status_code == 400, reply.text
    assert field in reply.json()["error"]["message"]
    assert stats["num_prompt_tokens_computed"] == 0 and stats["num_generated_tokens"] == 0
