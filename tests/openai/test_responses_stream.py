"""Responses streaming through the official client (`client.responses.create(..., stream=True)` parses every
event): the events come in OpenAI's order, the text deltas join to the non-streamed text, and the final
Response equals the non-streamed one (same seed)."""

from __future__ import annotations

import json

import pytest

from tests.openai.openai_builders import openai_serving
from tests.openai.test_responses_api import FLAT_TOOLS, _client, _respond

TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
CALL_EVENTS = [
    "response.output_item.added",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
]


def _same_reply(streamed: object, whole: object) -> None:
    for key in ("token_ids", "prompt_token_ids", "weight_version", "finish_reason"):
        assert streamed.model_extra[key] == whole.model_extra[key], key
    assert streamed.status == whole.status and streamed.output_text == whole.output_text


def test_text_deltas_join_to_the_non_streamed_text_and_the_final_response_equals_it() -> None:
    include = ["message.output_text.logprobs"]
    with openai_serving() as (_, http):
        client = _client(http)
        whole = _respond(client, input="weather?", include=include, max_output_tokens=24)
        events = list(_respond(client, input="weather?", include=include, max_output_tokens=24, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == TEXT_EVENTS and kinds[-4:] == [*CLOSING, "response.incomplete"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert "".join(d.delta for d in deltas) == whole.output_text
    streamed_logprobs = [lp.logprob for d in deltas for lp in d.logprobs]
    done = next(e for e in events if e.type == "response.output_text.done")
    assert [lp.logprob for lp in done.logprobs] == pytest.approx(
        whole.model_extra["token_logprobs"], abs=1e-5
    )
    assert streamed_logprobs == [lp.logprob for lp in done.logprobs][: len(streamed_logprobs)]
    _same_reply(events[-1].response, whole)


def test_a_streamed_function_call_is_an_item_with_its_arguments_and_equals_the_non_streamed_one() -> None:
    kwargs = {
        "input": "weather?",
        "tools": FLAT_TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": False,
    }
    with openai_serving() as (_, http):
        client = _client(http)
        whole = _respond(client, max_output_tokens=200, **kwargs)
        events = list(_respond(client, max_output_tokens=200, stream=True, **kwargs))
    kinds = [e.type for e in events]
    assert kinds == ["response.created", "response.in_progress", *CALL_EVENTS, "response.completed"]
    done = events[-2].item
    (call,) = whole.output
    assert (done.type, done.name, done.arguments) == ("function_call", call.name, call.arguments)
    assert events[3].delta == call.arguments and json.loads(events[4].arguments)["city"] in ("Paris", "Rome")
    final = events[-1].response
    assert [(o.type, o.name, o.arguments) for o in final.output] == [(call.type, call.name, call.arguments)]
    _same_reply(final, whole)


def test_a_streamed_response_is_stored_and_continued_token_in() -> None:
    with openai_serving() as (_, http):
        client = _client(http)
        first = list(_respond(client, input="weather?", stream=True))[-1].response
        second = _respond(client, input="and tomorrow?", previous_response_id=first.id)
    held = first.model_extra["prompt_token_ids"] + first.model_extra["token_ids"]
    assert second.model_extra["prompt_token_ids"][: len(held)] == held
