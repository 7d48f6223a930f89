"""Tool calls in a completion's text -> OpenAI `tool_calls`, for the common formats.

`hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes, Qwen 2.5/3);
`llama3_json`: the whole reply is `{"name": ..., "parameters": {...}}` (several joined by `;`),
optionally after `<|python_tag|>` (Llama 3.1-3.3). The parser is picked from the chat template
(`parser_for_template`) unless `rollout serve --tool-call-parser` names one. A call that does not
parse leaves the whole reply as text, never dropped; the raw token ids are returned either way.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
PYTHON_TAG = "<|python_tag|>"


@dataclass(frozen=True)
class ParsedReply:
    """What the client sees: `content` (None when the reply was only calls) and the calls."""

    content: str | None
    tool_calls: list[dict[str, Any]]


def parse_hermes(text: str) -> ParsedReply:
    bodies = _HERMES.findall(text)
    if not bodies:
        return ParsedReply(text, [])
    calls = [_call(_object(body), "arguments") for body in bodies]
    if any(c is None for c in calls):
        return ParsedReply(text, [])
    rest = _HERMES.sub("", text).strip()
    return ParsedReply(rest or None, calls)


def parse_llama3_json(text: str) -> ParsedReply:
    body = text.strip()
    body = body[len(PYTHON_TAG) :].strip() if body.startswith(PYTHON_TAG) else body
    if not body.startswith("{"):
        return ParsedReply(text, [])
    calls = [_call(_object(part), "parameters") for part in body.split(";") if part.strip()]
    if not calls or any(c is None for c in calls):
        return ParsedReply(text, [])
    return ParsedReply(None, calls)


def parse_none(text: str) -> ParsedReply:
    return ParsedReply(text, [])


PARSERS: dict[str, Callable[[str], ParsedReply]] = {
    "hermes": parse_hermes,
    "llama3_json": parse_llama3_json,
    "none": parse_none,
}


def parser_for_template(template: str | None) -> str:
    """The parser a chat template's own tool-call spelling implies; "none" when it shows none."""
    template = template or ""
    if "<tool_call>" in template:
        return "hermes"
    if PYTHON_TAG in template or ("ipython" in template and "parameters" in template):
        return "llama3_json"
    return "none"


def _object(body: str) -> dict[str, Any] | None:
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _call(value: dict[str, Any] | None, arguments_key: str) -> dict[str, Any] | None:
    """The call, or None: a call the front end would refuse when the agent sends it back in its history
    (a name that is not a non-empty string, arguments that are not a JSON object) stays text."""
    if value is None or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    arguments = value.get(arguments_key, value.get("arguments", {}))
    if not isinstance(arguments, dict) and not (
        isinstance(arguments, str) and _object(arguments) is not None
    ):
        return None
    encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)  # the model's spelling
    function = {"name": value["name"], "arguments": encoded}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}
