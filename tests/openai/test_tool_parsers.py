"""Tool calls in replies -> OpenAI tool_calls; a call that does not parse stays text."""

from __future__ import annotations

import json

import openai

from rollout.openai.tools.tool_parsers import (
    ParsedReply,
    parse_hermes,
    parse_llama3_json,
    parser_for_template,
)
from tests.builders import TOOL_CHAT_TEMPLATE
from tests.openai.openai_builders import HERMES_TEMPLATE, chat_engine, openai_serving


def test_hermes_calls_become_tool_calls_and_the_rest_stays_content() -> None:
    text = 'let me check <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    reply = parse_hermes(text)
    assert reply.content == "let me check"
    assert [c["function"]["name"] for c in reply.tool_calls] == ["get_weather"]
    assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_a_malformed_hermes_call_is_returned_as_text_never_dropped() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>'
    assert parse_hermes(text).content == text and parse_hermes(text).tool_calls == []


def test_a_call_the_front_end_would_refuse_in_a_history_stays_text() -> None:
    """An agent sends each reply back as history, where arguments must be a JSON object in a string
    and the name a non-empty string (message_schema.py): such a call is returned as text instead."""
    for call in [
        '{"name": "get_weather", "arguments": "Paris"}',
        '{"name": "get_weather", "arguments": "[1, 2]"}',
        '{"name": "get_weather", "arguments": [1, 2]}',
        '{"name": "", "arguments": {}}',
    ]:
        text = f"<tool_call>{call}</tool_call>"
        assert parse_hermes(text) == ParsedReply(text, []), call
    spelled = parse_hermes('<tool_call>{"name": "f", "arguments": "{\\"x\\":1}"}</tool_call>')
    assert spelled.tool_calls[0]["function"]["arguments"] == '{"x":1}'  # the model's own spelling


def test_llama3_json_calls_after_the_python_tag_are_parsed() -> None:
    reply = parse_llama3_json(
        '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {}}'
    )
    assert [c["function"]["name"] for c in reply.tool_calls] == ["a", "b"] and reply.content is None
    assert parse_llama3_json("the answer is {").tool_calls == []


def test_the_parser_is_picked_from_the_chat_template() -> None:
    assert parser_for_template(HERMES_TEMPLATE) == "hermes"
    assert parser_for_template("{{ '<|python_tag|>' }}") == "llama3_json"
    assert parser_for_template(TOOL_CHAT_TEMPLATE) == "none"


def test_an_assistant_tool_call_from_the_client_reaches_the_template_and_round_trips() -> None:
    """An agent's history (assistant tool_calls, tool results) renders as the template spells it."""
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    engine = chat_engine()
    with openai_serving(engine) as (_, http):
        reply = openai.OpenAI(base_url=http.base_url, api_key="none").chat.completions.create(
            model="LlamaForCausalLM", messages=messages, max_tokens=2
        )
    want = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert reply.model_extra["prompt_token_ids"] == want
