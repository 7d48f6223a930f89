"""OpenAI's rules for chat messages and tools, checked before rendering: 400 naming the field path.

What every path checks (a role, text content, no media parts) is rollout/protocol/message_checks.py;
these are the rules of OpenAI's API on top: its roles, content part types per role, a tool message's
`tool_call_id`, an assistant's `tool_calls` as `{id, type: "function", function: {name, arguments}}`
with `arguments` a JSON object spelled as a string (vLLM parses it too), tools as
`{"type": "function", "function": {"name", ...}}`. Each of these reached the template before and was
rendered as whatever it made of them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

from rollout.multimodal.chat_images import take_images
from rollout.multimodal.image_parts import ImageLimits
from rollout.protocol.chat_messages import conversation_json, tools_json

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# The content part types each role may send (media parts are refused earlier, for every role).
PART_TYPES = {"assistant": ("text", "refusal"), "user": ("text", "image")}
TEXT_PARTS = ("text",)


def openai_conversation(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, images: ImageLimits | None = None
) -> tuple[list[dict[str, Any]], list[Any] | None, list[Image.Image]]:
    """The request's messages and tools as the template gets them, checked by every path's rules and
    OpenAI's, and the images of its image parts (`images`: the limits, when the model takes images; each
    part left as a {"type": "image"} placeholder, rollout/multimodal/chat_images.py); ValueError naming
    the field path (`messages[2].role`, `tools[0].function.name`, `messages[0].content[1]`)."""
    taken: list[Image.Image] = []
    if images is not None:
        messages, taken = take_images(messages, "messages", images)
    turns = conversation_json(messages, "messages", images=bool(taken))
    check_messages(turns)
    check_tools(tools)
    return turns, tools_json(tools), taken


def check_messages(messages: Sequence[Mapping[str, Any]], field: str = "messages") -> None:
    for i, message in enumerate(messages):
        check_message(message, f"{field}[{i}]")


def check_message(message: Mapping[str, Any], field: str) -> None:
    role = message["role"]  # present and a string: message_checks.py ran first
    if role not in ROLES:
        raise ValueError(f"{field}.role: {role!r} is not a role; use one of {', '.join(ROLES)}")
    _optional_string(message, "name", field)
    content = message.get("content")
    if content is None and role in ("system", "developer", "user", "tool"):
        raise ValueError(f"{field}.content: missing; a {role} message needs content")
    if isinstance(content, list):
        _check_parts(content, PART_TYPES.get(role, TEXT_PARTS), role, f"{field}.content")
    if role == "tool":
        _required_string(message, "tool_call_id", field, "a tool message answers the call with this id")
    if role == "function":
        _required_string(message, "name", field, "a function message names its function")
    if role == "assistant" and message.get("tool_calls") is not None:
        _check_tool_calls(message["tool_calls"], f"{field}.tool_calls")


def check_tools(tools: Sequence[Any] | None, field: str = "tools") -> None:
    for i, tool in enumerate(tools or ()):
        where = f"{field}[{i}]"
        if not isinstance(tool, Mapping):
            raise ValueError(f"{where}: a tool must be an object, got {type(tool).__name__}")
        if tool.get("type") != "function":
            raise ValueError(f'{where}.type: must be "function", got {tool.get("type")!r}')
        function = tool.get("function")
        if not isinstance(function, Mapping):
            raise ValueError(
                f'{where}.function: missing; a tool is {{"type": "function", "function": {{"name": ...}}}}'
            )
        _name(function, f"{where}.function")
        _optional_string(function, "description", f"{where}.function")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ValueError(f"{where}.function.parameters: must be a JSON Schema object")


def _check_parts(parts: list[Any], allowed: tuple[str, ...], role: str, field: str) -> None:
    for i, part in enumerate(parts):
        kind = part["type"]  # an object with a string type: message_checks.py ran first
        if kind not in allowed:
            raise ValueError(
                f"{field}[{i}].type: {kind!r} parts are not taken in a {role} message; "
                f"use {' or '.join(repr(a) for a in allowed)}"
            )
        if kind == "refusal" and not isinstance(part.get("refusal"), str):
            raise ValueError(f"{field}[{i}].refusal: a refusal part needs its text as a string")


def _check_tool_calls(calls: Any, field: str) -> None:
    if not isinstance(calls, list):
        raise ValueError(f"{field}: must be a list of tool calls, got {type(calls).__name__}")
    for i, call in enumerate(calls):
        where = f"{field}[{i}]"
        if not isinstance(call, Mapping):
            raise ValueError(f"{where}: a tool call must be an object, got {type(call).__name__}")
        _required_string(call, "id", where, "the tool message answering it names this id")
        if call.get("type") != "function":
            raise ValueError(f'{where}.type: must be "function", got {call.get("type")!r}')
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise ValueError(f'{where}.function: missing; a call is {{"function": {{"name", "arguments"}}}}')
        _name(function, f"{where}.function")
        _check_arguments(function.get("arguments"), f"{where}.function.arguments")


def _check_arguments(arguments: Any, field: str) -> None:
    """A JSON object spelled as a string, as OpenAI sends and takes them."""
    if not isinstance(arguments, str):
        raise ValueError(f"{field}: must be a string holding a JSON object, got {type(arguments).__name__}")
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{field}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{field}: must be a JSON object, got a JSON {type(value).__name__}")


def _name(function: Mapping[str, Any], field: str) -> None:
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{field}.name: must be a non-empty string, got {name!r}")


def _required_string(message: Mapping[str, Any], key: str, field: str, why: str) -> None:
    value = message.get(key)
    if value is None:
        raise ValueError(f"{field}.{key}: missing; {why}")
    if not isinstance(value, str):
        raise ValueError(f"{field}.{key}: must be a string, got {type(value).__name__}")


def _optional_string(message: Mapping[str, Any], key: str, field: str) -> None:
    value = message.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{field}.{key}: must be a string, got {type(value).__name__}")
