"""The Responses API through the official client: text and message input, function tools and their items,
`store` / `previous_response_id` (token-in), the token-exact extensions, errors naming the field.

The oracle is the chat endpoint on the same server with the same seed: a Response is served as that chat
request, so its tokens, text and logprobs must be the chat choice's (chat's are checked against a
teacher-forced forward in test_endpoints.py)."""

from __future__ import annotations

import json

import openai
import pytest

from rollout.openai.responses_api.response_store import ResponseStore, StoredResponse
from tests.openai.openai_builders import openai_serving

MODEL = "LlamaForCausalLM"
SAMPLING = {"seed": 5, "ignore_eos": True}
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
    "required": ["city"],
    "additionalProperties": False,
}
FLAT_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}]
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def _client(http: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)


def _respond(client: openai.OpenAI, **kwargs: object) -> object:
    kwargs = {"model": MODEL, "max_output_tokens": 16, "temperature": 1.0, **kwargs}
    return client.responses.create(extra_body={**SAMPLING, **kwargs.pop("extra_body", {})}, **kwargs)


def _chat(client: openai.OpenAI, messages: list[dict], **kwargs: object) -> object:
    kwargs = {"model": MODEL, "max_tokens": 16, "temperature": 1.0, "logprobs": True, **kwargs}
    return client.chat.completions.create(messages=messages, extra_body=SAMPLING, **kwargs)


def test_text_input_is_the_chat_reply_with_its_tokens_logprobs_and_weight_version() -> None:
    with openai_serving() as (_, http):
        client = _client(http)
        response = _respond(client, input="weather?", include=["message.output_text.logprobs"])
        chat = _chat(client, [{"role": "user", "content": "weather?"}])
    choice = chat.choices[0]
    assert response.object == "response" and response.status == "incomplete"  # ran out of tokens
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == choice.message.content
    assert response.model_extra["token_ids"] == choice.model_extra["token_ids"]
    assert response.model_extra["prompt_token_ids"] == chat.model_extra["prompt_token_ids"]
    # the second request's prompt comes from the prefix cache: fp32 rounding, not another distribution
    chat_logprobs = [e.logprob for e in choice.logprobs.content]
    assert response.model_extra["token_logprobs"] == pytest.approx(chat_logprobs, abs=1e-5)
    assert [e.logprob for e in response.output[0].content[0].logprobs] == response.model_extra[
        "token_logprobs"
    ]
    assert response.model_extra["weight_version"] == choice.model_extra["weight_version"]
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens == 16


def test_message_items_and_instructions_are_the_chat_conversation() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
    ]
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "weather?"},
    ]
    with openai_serving() as (_, http):
        client = _client(http)
        response = _respond(client, input=items, instructions="be brief")
        chat = _chat(client, messages)
    assert response.model_extra["prompt_token_ids"] == chat.model_extra["prompt_token_ids"]
    assert response.model_extra["token_ids"] == chat.choices[0].model_extra["token_ids"]
    assert response.model_extra["prefix_stable"] == chat.model_extra["prefix_stable"]


def test_a_forced_function_call_is_a_function_call_item_and_its_output_goes_back_as_a_tool_message() -> None:
    with openai_serving() as (_, http):
        client = _client(http)
        first = _respond(
            client,
            input="weather?",
            tools=FLAT_TOOLS,
            tool_choice="required",
            parallel_tool_calls=False,
            max_output_tokens=200,
        )
        (call,) = [item for item in first.output if item.type == "function_call"]
        assert call.name == "get_weather" and json.loads(call.arguments)["city"] in ("Paris", "Rome")
        assert call.call_id.startswith("call_") and first.status == "completed"
        items = [
            "weather?",
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ]
        items[0] = {"role": "user", "content": "weather?"}
        second = _respond(client, input=items, tools=FLAT_TOOLS, store=False)
        messages = [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"},
        ]
        chat = _chat(client, messages, tools=CHAT_TOOLS)
    assert second.model_extra["prompt_token_ids"] == chat.model_extra["prompt_token_ids"]


def test_a_named_function_in_the_flat_form_is_forced() -> None:
    with openai_serving() as (_, http):
        response = _respond(
            _client(http),
            input="x",
            tools=FLAT_TOOLS,
            tool_choice={"type": "function", "name": "get_weather"},
            max_output_tokens=200,
        )
    assert [item.name for item in response.output if item.type == "function_call"] == ["get_weather"]


def test_previous_response_id_continues_token_in_from_the_stored_tokens() -> None:
    with openai_serving() as (_, http):
        client = _client(http)
        first = _respond(client, input="weather?", instructions="be brief")
        second = _respond(
            client, input="and tomorrow?", instructions="be brief", previous_response_id=first.id
        )
        third = _respond(client, input="thanks", instructions="be brief", previous_response_id=second.id)
        fetched = client.responses.retrieve(second.id)
    turns = [first, second, third]
    for earlier, later in zip(turns, turns[1:], strict=False):
        held = earlier.model_extra["prompt_token_ids"] + earlier.model_extra["token_ids"]
        assert later.model_extra["prompt_token_ids"][: len(held)] == held
        assert "prefix_stable" not in later.model_extra  # token-in: nothing re-rendered
    assert fetched.id == second.id and fetched.output_text == second.output_text


def test_store_false_is_stateless_and_an_unknown_id_is_404_naming_the_field() -> None:
    with openai_serving() as (_, http):
        client = _client(http)
        unstored = _respond(client, input="x", store=False)
        with pytest.raises(openai.NotFoundError) as caught:
            _respond(client, input="y", previous_response_id=unstored.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unstored.id)
    assert caught.value.body["param"] == "previous_response_id"


def test_the_store_is_bounded_and_forgets_the_least_recently_used() -> None:
    store = ResponseStore(capacity=2)
    for name in ("a", "b"):
        store.put(name, StoredResponse({"id": name}, [], None, [1]))
    store.get("a")  # used: b is now the oldest
    store.put("c", StoredResponse({"id": "c"}, [], None, [1]))
    assert len(store) == 2 and store.get("a") and store.get("c")
    with pytest.raises(LookupError, match="keeps the last 2"):
        store.get("b")


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type"),
        ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "x", "truncation": "auto"}, "truncation"),
        ({"input": "x", "extra_body": {"temprature": 1.0}}, "temprature"),
    ],
)
def test_what_cannot_be_served_is_400_naming_the_field(kwargs: dict, param: str) -> None:
    with openai_serving() as (_, http), pytest.raises(openai.BadRequestError) as caught:
        _respond(_client(http), **kwargs)
    assert caught.value.body["param"] == param, caught.value.body
