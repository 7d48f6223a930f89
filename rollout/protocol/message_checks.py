"""What every chat message must be, whatever its template: checked before rendering, naming the field.

A template renders whatever it is given: a message without a role becomes `<>`, numeric content is
silently dropped by `{% if content is string %}`, an image part becomes a placeholder with no pixels.
Each is refused here for every path (the OpenAI front end, gRPC, the offline `LLM.chat`). Roles stay
open (templates define their own, e.g. Llama's `ipython`); OpenAI's stricter rules are the HTTP front
end's (rollout/openai/requests/message_schema.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Content parts that carry media: each is refused rather than rendered as a placeholder the model would read
# with nothing behind it. Image parts are served on image-text-to-text models: their images are taken out
# first (rollout/multimodal/chat_images.py), leaving {"type": "image"} placeholders, allowed with `images`.
MEDIA_PARTS = frozenset(
    {
        "image_url",
        "image",
        "input_image",
        "input_audio",
        "audio",
        "audio_url",
        "video",
        "video_url",
        "file",
        "input_file",
    }
)


def check_message(message: Mapping[str, Any], field: str, images: bool = False) -> None:
    """ValueError naming `field.<key>` unless `message` has a role and text (or no) content."""
    role = message.get("role")
    if role is None:
        raise ValueError(f"{field}.role: missing; every message needs a role (system, user, assistant, tool)")
    if not isinstance(role, str) or not role:
        raise ValueError(f"{field}.role: must be a non-empty string, got {role!r}")
    check_content(message.get("content"), f"{field}.content", images)


def check_content(content: Any, field: str, images: bool = False) -> None:
    """A string, a list of content parts, or null (an assistant turn holding only tool calls)."""
    if content is None or isinstance(content, str):
        return
    if isinstance(content, Mapping) or not isinstance(content, Sequence):
        raise ValueError(
            f"{field}: must be a string, a list of content parts or null, got {type(content).__name__}"
        )
    for i, part in enumerate(content):
        check_part(part, f"{field}[{i}]", images)


def check_part(part: Any, field: str, images: bool = False) -> None:
    if not isinstance(part, Mapping):
        raise ValueError(f"{field}: a content part must be an object with a type, got {type(part).__name__}")
    kind = part.get("type")
    if kind is None:
        raise ValueError(f'{field}.type: missing; a content part needs a type (e.g. "text")')
    if not isinstance(kind, str):
        raise ValueError(f"{field}.type: must be a string, got {kind!r}")
    if images and kind == "image" and set(part) == {"type"}:
        return  # the placeholder an image part left (its image rides beside the messages)
    if kind in MEDIA_PARTS:
        raise ValueError(
            f"{field}: {kind!r} parts are not served here: images only on an image-text-to-text model, and "
            "no audio, video or files; send text parts"
        )
    if kind == "text" and not isinstance(part.get("text"), str):
        raise ValueError(f"{field}.text: a text part needs its text as a string")


def check_conversation(messages: Sequence[Mapping[str, Any]], field: str, images: bool = False) -> None:
    for i, message in enumerate(messages):
        check_message(message, f"{field}[{i}]", images)
