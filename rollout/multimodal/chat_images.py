"""Images in chat messages: OpenAI's `image_url` parts (data URLs; http(s) only where fetching is allowed),
vLLM's `image` / `image_pil` parts (PIL images, bytes) and the Responses API's `input_image`.

Each image part is replaced by a bare `{"type": "image"}` part, which chat templates render as the model's
placeholder, and its image is decoded and kept beside the messages in order: the rendered prompt's
placeholders and the images then pair up one to one (image_prompt.py checks it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

from rollout.multimodal.image_parts import ImageLimits, load_image

IMAGE_PARTS = frozenset({"image_url", "image", "image_pil", "input_image"})


def take_images(
    messages: Sequence[Any], field: str, limits: ImageLimits, allow_paths: bool = False
) -> tuple[list[Any], list[Image.Image]]:
    """(messages with placeholders, the images in order); ValueError naming the part otherwise."""
    out: list[Any] = []
    images: list[Image.Image] = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, (list, tuple)):
            out.append(message)
            continue
        parts = []
        for j, part in enumerate(content):
            name = f"{field}[{i}].content[{j}]"
            value = _image_value(part, name)
            if value is None:
                parts.append(part)
                continue
            images.append(load_image(value, name, limits, allow_paths))
            parts.append({"type": "image"})
        out.append({**message, "content": parts})
    if len(images) > limits.max_images:
        raise ValueError(
            f"{field}: {len(images)} images, more than the {limits.max_images} a prompt may carry "
            "(limit_mm_per_prompt)"
        )
    return out, images


def _image_value(part: Any, field: str) -> Any:
    """The image a part carries, or None for any other part (and for a bare placeholder)."""
    if not isinstance(part, Mapping) or part.get("type") not in IMAGE_PARTS:
        return None
    kind = part["type"]
    value = part.get(kind) if kind != "input_image" else part.get("image_url")
    if kind == "image" and value is None and set(part) == {"type"}:
        return None
    if isinstance(value, Mapping) and kind in ("image_url", "input_image"):
        value = value.get("url")
    if value is None:
        raise ValueError(f"{field}.{kind}: missing; an {kind!r} part carries its image there")
    return value
