"""Chat conversations as JSON, so every message reaches the chat template as the caller wrote it.

Templates read more than role and string content: tool calls, tool results, `name`, lists of content
parts, reasoning content, tool definitions. Each message therefore travels (and is rendered offline)
as its JSON value; what is not JSON is refused naming the field, and nothing is ever stringified.
Shared by the client (to protobuf), the servicer (from protobuf) and the offline `LLM.chat`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.message_checks import check_conversation
from rollout.sampling_params.field_checks import check_unicode

Message = Mapping[str, Any]
Conversation = Sequence[Message]


def is_conversation(prompt: object) -> bool:
    """A non-empty list of mappings: chat messages rather than text or token ids."""
    return (
        isinstance(prompt, Sequence)
        and not isinstance(prompt, str)
        and bool(prompt)
        and all(isinstance(m, Mapping) for m in prompt)
    )


def json_value(value: Any, field: str) -> Any:
    """`value` as plain JSON (dicts, lists, str, finite numbers, bools, None) holding only Unicode text;
    ValueError names the field."""
    if isinstance(value, str):
        check_unicode(field, value)
        return value
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{field}: {value} is not a JSON number")
        return value
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise ValueError(f"{field}: key {key!r} is not a string, so the object is not JSON")
            check_unicode(field, key)
        return {key: json_value(item, f"{field}.{key}") for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(item, f"{field}[{i}]") for i, item in enumerate(value)]
    raise ValueError(
        f"{field}: a {type(value).__name__} is not JSON; send strings, numbers, lists or objects"
    )


def conversation_json(messages: Conversation, field: str, images: bool = False) -> list[dict[str, Any]]:
    """The messages as JSON objects, exactly what a server decodes from `conversation_to_proto`; each
    one checked (message_checks.py); `images`: bare {"type": "image"} placeholder parts are allowed (their
    images were taken out, rollout/multimodal/chat_images.py)."""
    if not is_conversation(messages):
        raise ValueError(f"{field}: must be a non-empty list of message objects")
    turns = [json_value(m, f"{field}[{i}]") for i, m in enumerate(messages)]
    check_conversation(turns, field, images)
    return turns


def tools_json(tools: Sequence[Any] | None, field: str = "tools") -> list[Any] | None:
    if tools is None:
        return None
    if isinstance(tools, (str, Mapping)) or not isinstance(tools, Sequence):
        raise ValueError(f"{field}: must be a list of tool definitions")
    return json_value(tools, field)


def conversation_to_proto(
    messages: Conversation, tools: Sequence[Any] | None, field: str, images: bool = False
) -> pb.ChatMessages:
    """Plain turns keep the old role/content fields (older servers read them); the rest go as JSON.
    `images`: image placeholder parts allowed (their images travel in `Prompt.images`)."""
    turns = conversation_json(messages, field, images)
    chat = pb.ChatMessages(messages=[_message_to_proto(m) for m in turns])
    listed = tools_json(tools)
    if listed is not None:
        chat.tools_json = json.dumps(listed)
    return chat


def _message_to_proto(message: dict[str, Any]) -> pb.ChatMessage:
    if set(message) == {"role", "content"} and all(isinstance(v, str) for v in message.values()):
        return pb.ChatMessage(role=message["role"], content=message["content"])
    return pb.ChatMessage(message_json=json.dumps(message))


def conversation_from_proto(
    chat: pb.ChatMessages, images: bool = False
) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """The messages and tools a client sent; ValueError naming the field that does not decode.
    `images`: the prompt carries images, so image placeholder parts are allowed."""
    messages = [_message_from_proto(m, f"chat.messages[{i}]") for i, m in enumerate(chat.messages)]
    if not messages:
        raise ValueError("chat: no messages")
    check_conversation(messages, "chat.messages", images)
    tools = _decode(chat.tools_json, "chat.tools_json") if chat.HasField("tools_json") else None
    if tools is not None and not isinstance(tools, list):
        raise ValueError("chat.tools_json: must be a JSON array of tool definitions")
    return messages, json_value(tools, "chat.tools_json")


def _message_from_proto(message: pb.ChatMessage, field: str) -> dict[str, Any]:
    if not message.message_json:
        return {"role": message.role, "content": message.content}
    value = _decode(message.message_json, f"{field}.message_json")
    if not isinstance(value, dict):
        raise ValueError(f"{field}.message_json: must be a JSON object, got {type(value).__name__}")
    return json_value(value, f"{field}.message_json")  # JSON escapes can spell lone surrogates


def _decode(text: str, field: str) -> Any:
    try:
        return json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{field}: invalid JSON ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON number")


def message_chars(message: pb.ChatMessage) -> int:
    """Characters a message sends: an upper bound of what it adds to the rendered prompt's load."""
    return len(message.message_json) or len(message.role) + len(message.content)
