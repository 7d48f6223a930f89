"""Chat messages and tools as OpenAI checks them, through the official client: each malformed one is 400
naming its field path (all were rendered by the template and served with 200 before); every shape
OpenAI defines is still served, rendered as the template renders it."""

from __future__ import annotations

import openai

from tests.openai.openai_builders import chat_engine, openai_serving

MODEL = "LlamaForCausalLM"
USER = {"role": "user", "content": "weather?"}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def with_call(**function: object) -> list[dict]:
    call = {**CALL, "function": {**CALL["function"], **function}}
    return [USER, {"role": "assistant", "content": None, "tool_calls": [call]}, {**USER, "content": "and?"}]


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
# (messages, tools, the field path the 400 names)
REFUSED = [
    ([{"content": "hi"}], None, "messages[0].role"),
    ([USER, {"role": "wizard", "content": "hi"}], None, "messages[1].role"),
    ([{"role": "user", "content": 5}], None, "messages[0].content"),
    ([{"role": "user", "content": None}], None, "messages[0].content"),
    ([{"role": "user", "content": [{"text": "hi"}]}], None, "messages[0].content[0].type"),
    ([{"role": "user", "content": [{"type": "text", "text": "hi"}, IMAGE]}], None, "messages[0].content[1]"),
    (
        [{"role": "system", "content": [{"type": "refusal", "refusal": "no"}]}],
        None,
        "messages[0].content[0].type",
    ),
    ([USER], [{"type": "function"}], "tools[0].function"),
    ([USER], [{"type": "function", "function": {"name": 5}}], "tools[0].function.name"),
    ([USER], [{"function": TOOL["function"]}], "tools[0].type"),
    (with_call(arguments="{not json"), None, "messages[1].tool_calls[0].function.arguments"),
    (with_call(arguments='["a list"]'), None, "messages[1].tool_calls[0].function.arguments"),
    (with_call(arguments={"city": "Paris"}), None, "messages[1].tool_calls[0].function.arguments"),
    (with_call(name=7), None, "messages[1].tool_calls[0].function.name"),
    (
        [USER, {"role": "assistant", "tool_calls": [{"type": "function"}]}],
        None,
        "messages[1].tool_calls[0].id",
    ),
    ([*with_call()[:2], {"role": "tool", "content": "sunny"}], None, "messages[2].tool_call_id"),
    (
        [*with_call()[:2], {"role": "tool", "tool_call_id": 1, "content": "x"}],
        None,
        "messages[2].tool_call_id",
    ),
]


def refused_param(client: openai.OpenAI, messages: list[dict], tools: list | None) -> tuple[int, str | None]:
    extra = {"tools": tools} if tools is not None else {}
    try:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, **extra)
    except openai.BadRequestError as exc:
        return exc.status_code, exc.param
    return 200, None


def test_each_malformed_message_or_tool_is_400_naming_its_path() -> None:
    with openai_serving() as (grpc_server, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        got = [refused_param(client, messages, tools) for messages, tools, _ in REFUSED]
        admitted = grpc_server.loop.counters["accepted"]
    assert got == [(400, param) for *_, param in REFUSED]
    assert admitted == 0  # none reached the engine


def test_every_message_shape_openai_defines_is_served_as_the_template_renders_it() -> None:
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "system", "content": [{"type": "text", "text": "you are helpful"}]},
        {"role": "user", "name": "ann", "content": [{"type": "text", "text": "weather in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no more tools"}]},
        {"role": "user", "content": "thanks"},
    ]
    engine = chat_engine()
    with openai_serving(engine) as (_, http):
        reply = openai.OpenAI(base_url=http.base_url, api_key="none").chat.completions.create(
            model=MODEL, messages=messages, tools=[TOOL], max_tokens=1
        )
    want = engine.tokenizer.apply_chat_template(
        messages, tools=[TOOL], add_generation_prompt=True, return_dict=False
    )
    assert reply.model_extra["prompt_token_ids"] == want
