"""Structured outputs through the OpenAI front end, driven by the official client: response_format,
vLLM's structured_outputs object and its guided_* keys all constrain the text; two at once are 400."""

from __future__ import annotations

import json
import re

import openai
import pytest

from tests.openai.openai_builders import openai_serving

pytest.importorskip("xgrammar")

MESSAGES = [{"role": "user", "content": "answer?"}]
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2]}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}


def _chat(client: openai.OpenAI, **kwargs: object) -> list[str]:
    reply = client.chat.completions.create(
        model="LlamaForCausalLM", messages=MESSAGES, n=2, seed=1, max_tokens=60, **kwargs
    )
    return [choice.message.content for choice in reply.choices]


def test_response_format_json_schema_gives_json_that_follows_it() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        texts = _chat(
            client,
            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
            extra_body={},
        )
    for text in texts:
        value = json.loads(text)
        assert isinstance(value["ok"], bool) and value["n"] in (1, 2) and set(value) == {"ok", "n"}


def test_vllm_structured_outputs_and_guided_keys_constrain_the_text() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        choices = _chat(client, extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
        regexed = _chat(client, extra_body={"guided_regex": "[A-Z]{2}-[0-9]{3}"})
        completion = client.completions.create(
            model="LlamaForCausalLM", prompt="x", max_tokens=20, extra_body={"guided_choice": ["up", "down"]}
        )
    assert set(choices) <= {"yes", "no"}
    assert all(re.fullmatch("[A-Z]{2}-[0-9]{3}", t) for t in regexed)
    assert completion.choices[0].text in ("up", "down")


def test_two_ways_at_once_are_400_naming_them() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="guided_regex and response_format"):
            _chat(client, response_format={"type": "json_object"}, extra_body={"guided_regex": "a"})
        with pytest.raises(openai.BadRequestError, match="structured_outputs.regex"):
            _chat(client, extra_body={"structured_outputs": {"regex": "(a"}})


def test_min_tokens_with_a_grammar_delays_the_end_and_the_text_still_matches() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = client.completions.create(
            model="LlamaForCausalLM",
            prompt="x",
            n=2,
            seed=1,
            max_tokens=20,
            extra_body={"guided_regex": "[a-z]+", "min_tokens": 8},
        )
    ends = [(c.finish_reason, c.text) for c in reply.choices]
    assert all(re.fullmatch("[a-z]{8,}", text) for _, text in ends), ends  # no EOS before 8 letters
    assert "stop" in {reason for reason, _ in ends}, ends
