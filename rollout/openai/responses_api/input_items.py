"""Responses input items, tools, tool_choice and text format -> their chat equivalents (vLLM's mapping).

`input` is text (one user message) or items: `message` (roles user, system, developer, assistant;
content as text or `input_text` / `output_text` / `refusal` parts, joined), `function_call` (an
assistant tool call; calls right after an assistant message or each other join that assistant turn)
and `function_call_output` (a tool message answering `call_id`). Other items (images, files,
reasoning, references) are refused naming `input[i]`: dropping one would change the prompt unsaid.
Function tools are flat (`{"type": "function", "name", "parameters"}`); chat nests them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")


def chat_messages(items: str | list[dict[str, Any]], field: str = "input") -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            _add_call(messages, item, where)
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", where)
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": _text(item.get("output"), where)}
            )
        else:
            raise ValueError(
                f"{where}.type: {kind!r} items are not taken here; use message, function_call or "
                "function_call_output"
            )
    return messages


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Flat function tools -> chat's nested ones (`strict` is accepted: arguments follow the schema
    when the call is forced, docs/openai.md)."""
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise ValueError(
                f'tools[{i}].type: only "function" tools are served here, got {tool.get("type")!r}'
            )
        function = {"name": _string(tool, "name", f"tools[{i}]")}
        for key in ("description", "parameters"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """`{"type": "function", "name": X}` -> chat's `{"type": "function", "function": {"name": X}}`."""
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") != "function":
        raise ValueError(
            f'tool_choice.type: {choice.get("type")!r} is not served here; use "none", "auto", "required" '
            'or {"type": "function", "name": ...}'
        )
    return {"type": "function", "function": {"name": _string(choice, "name", "tool_choice")}}


def chat_response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` -> chat's `response_format` (`verbosity` changes nothing here)."""
    fmt = (text or {}).get("format")
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name"), "schema": fmt.get("schema")}}
    raise ValueError(
        f"text.format.type: {fmt.get('type')!r} is not one of 'text', 'json_object', 'json_schema'"
    )


def _message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise ValueError(f"{where}.role: {role!r} is not one of {', '.join(ROLES)}")
    return {"role": role, "content": _text(item.get("content"), where)}


def _add_call(messages: list[dict[str, Any]], item: Mapping[str, Any], where: str) -> None:
    call = {
        "id": _string(item, "call_id", where),
        "type": "function",
        "function": {"name": _string(item, "name", where), "arguments": _string(item, "arguments", where)},
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _text(content: Any, where: str) -> str:
    """A string, or the text of `input_text` / `output_text` / `refusal` parts joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"{where}.content: must be a string or a list of content parts")
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in TEXT_PARTS:
            texts.append(_string(part, "text", f"{where}.content[{j}]"))
        elif kind == "refusal":
            texts.append(_string(part, "refusal", f"{where}.content[{j}]"))
        else:
            raise ValueError(
                f"{where}.content[{j}].type: {kind!r} parts are not taken (text only: the models are "
                "served text-only)"
            )
    return "\n".join(texts)


def _string(item: Mapping[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{where}.{key}: must be a string, got {type(value).__name__}")
    return value
