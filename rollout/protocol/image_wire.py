"""Images on the wire: the client's prompts with images -> `pb.Prompt` with `images`; PIL only, no torch.

A client prompt with images is vLLM's dict (`{"prompt": text or ids, "multi_modal_data": {"image": ...}}`)
or a chat whose messages hold image parts (chat_images.py's kinds); each image (a PIL image, bytes, a
path, a data URL) is decoded here, so a bad one is refused before sending, and sent as PNG.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from PIL import Image

from rollout.multimodal.chat_images import IMAGE_PARTS, take_images
from rollout.multimodal.image_parts import ImageLimits, load_image
from rollout.protocol.chat_messages import conversation_to_proto, is_conversation
from rollout.protocol.generated import rollout_pb2 as pb


def has_images(prompt: object) -> bool:
    """A dict with multi_modal_data, or a chat with an image part."""
    if isinstance(prompt, Mapping):
        return "multi_modal_data" in prompt
    if not is_conversation(prompt):
        return False
    return any(
        isinstance(part, Mapping) and part.get("type") in IMAGE_PARTS
        for message in prompt
        if isinstance(content := message.get("content"), (list, tuple))
        for part in content
    )


def image_prompt_to_proto(prompt: Any, field: str, tools: Sequence[Any] | None = None) -> pb.Prompt:
    limits = ImageLimits()
    if isinstance(prompt, Mapping):
        return _dict_prompt(prompt, field, limits)
    messages, images = take_images(prompt, field, limits, allow_paths=True)
    chat = conversation_to_proto(messages, tools, field, images=True)
    return pb.Prompt(chat=chat, images=[image_to_proto(image) for image in images])


def image_to_proto(image: Image.Image) -> pb.Image:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")  # lossless: the server decodes the very pixels
    return pb.Image(data=buffer.getvalue(), mime_type="image/png")


def _dict_prompt(prompt: Mapping[str, Any], field: str, limits: ImageLimits) -> pb.Prompt:
    data = prompt["multi_modal_data"]
    if not isinstance(data, Mapping) or set(data) != {"image"}:
        raise ValueError(
            f"{field}.multi_modal_data: must be {{'image': image or [images]}}; no other modality"
        )
    value = data["image"]
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    name = f"{field}.multi_modal_data.image"
    images = [
        image_to_proto(load_image(v, f"{name}[{i}]", limits, allow_paths=True)) for i, v in enumerate(values)
    ]
    text, ids = prompt.get("prompt"), prompt.get("prompt_token_ids")
    if isinstance(text, str) and ids is None:
        return pb.Prompt(text=text, images=images)
    ids = ids if ids is not None else text
    if isinstance(ids, Sequence) and ids and all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        return pb.Prompt(token_ids=pb.TokenIds(ids=list(ids)), images=images)
    raise ValueError(f"{field}: a prompt with multi_modal_data needs 'prompt' (text or token ids)")
