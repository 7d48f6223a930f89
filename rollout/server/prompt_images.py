"""A gRPC prompt's images, decoded and processed on the RPC thread (never on the engine loop's): each one
checked (a mime type naming an image, the size and count limits), then the prompt's placeholders expanded
for the model (rollout/multimodal/image_prompt.py)."""

from __future__ import annotations

from typing import Any

from rollout.multimodal.image_parts import ImageLimits, load_image
from rollout.multimodal.mm_inputs import MultiModalInputs
from rollout.protocol.generated import rollout_pb2 as pb


def prompt_images(
    images: Any, prompt: pb.Prompt, ids: list[int], limits: ImageLimits
) -> MultiModalInputs | None:
    """None for a prompt without images; ValueError naming `images[i]` for a bad one."""
    if not prompt.images:
        return None
    if images is None:
        raise ValueError("images: this model takes no images (it is not an image-text-to-text model)")
    if len(prompt.images) > limits.max_images:
        raise ValueError(
            f"images: {len(prompt.images)} images, more than the {limits.max_images} a prompt may carry "
            "(limit_mm_per_prompt)"
        )
    decoded = []
    for i, image in enumerate(prompt.images):
        if image.mime_type and not image.mime_type.startswith("image/"):
            raise ValueError(f"images[{i}].mime_type: {image.mime_type!r} is not an image type")
        decoded.append(load_image(image.data, f"images[{i}]", limits))
    return images.build(ids, decoded, "images")
