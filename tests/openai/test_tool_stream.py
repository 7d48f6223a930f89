"""tool_stream.content_end: every prefix of a reply streams only text that is a prefix of the content
its parser makes of the whole reply (calls or not, whatever whitespace the parser strips)."""

from __future__ import annotations

import pytest

from rollout.openai.tools.tool_parsers import PARSERS
from rollout.openai.tools.tool_stream import content_end

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
REPLIES = {
    "hermes": [
        f"Let me look. {CALL}  ",
        f"{CALL}",
        f"  Checking {CALL} done ",
        f"Hi {CALL}{CALL}",
        "no calls at all, a < sign and <tool",
        "<tool_call>{not json}</tool_call> tail",
        "text <tool_call> unclosed",
    ],
    "llama3_json": [
        ' {"name": "get_weather", "parameters": {"city": "Paris"}}',
        '<|python_tag|>{"name": "f", "parameters": {}}; {"name": "g", "parameters": {}}',
        "  plain text with {braces}",
        "{not a call",
        "<|pyt not the tag",
    ],
}


@pytest.mark.parametrize(("parser", "reply"), [(p, r) for p, rs in REPLIES.items() for r in rs])
def test_what_streams_early_is_always_a_prefix_of_the_final_content(parser: str, reply: str) -> None:
    content = PARSERS[parser](reply).content or ""
    for end in range(len(reply) + 1):
        assert content.startswith(reply[: content_end(parser, reply, end)]), (parser, reply, end)


def test_text_before_a_hermes_call_streams_before_the_call_completes() -> None:
    reply = f"Let me look. {CALL}"
    assert reply[: content_end("hermes", reply, len("Let me look. <tool"))] == "Let me look."
