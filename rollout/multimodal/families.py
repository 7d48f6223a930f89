"""Which image-text-to-text families the engine serves exactly, and why the others are refused.

A served family says how many tokens each image's features fill (the processor's expansion of its
placeholder) and which processor tensors its vision encoder takes. A refused family is named with the
feature the engine does not implement for it, at load, before anything is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class ImageFamily:
    model_type: str
    encoder_keys: tuple[str, ...]  # the processor's tensors `get_image_features` takes
    # (model config, encoder inputs) -> each image's number of feature tokens, in order
    tokens_per_image: Callable[[object, dict[str, torch.Tensor]], list[int]]
    # (model config, generator) -> encoder inputs of one synthetic image, for the load-time self-check
    probe: Callable[[object, torch.Generator], dict[str, torch.Tensor]]
    mrope: bool = False  # 3-D positions (temporal, height, width) from the model's get_rope_index


def image_token_id(config: object) -> int:
    """The placeholder id the model's forward fills with image features."""
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    raise ValueError(f"{type(config).__name__} names no image token id (image_token_id / image_token_index)")


def _llava_tokens(config: object, inputs: dict[str, torch.Tensor]) -> list[int]:
    """One token per patch (CLIP's class token too when the strategy keeps it: "full")."""
    pixels = inputs["pixel_values"]  # [num_images, 3, H, W]
    vision = config.vision_config
    count = (pixels.shape[-2] // vision.patch_size) * (pixels.shape[-1] // vision.patch_size)
    if config.vision_feature_select_strategy == "full" and vision.model_type == "clip_vision_model":
        count += 1
    return [count] * pixels.shape[0]


def _llava_probe(config: object, generator: torch.Generator) -> dict[str, torch.Tensor]:
    size = config.vision_config.image_size
    return {"pixel_values": torch.randn(1, 3, size, size, generator=generator)}


def _qwen_vl_probe(config: object, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A 4x4-patch image: pixel rows as the image processor flattens them (channels x time x patch x patch)."""
    vision = config.vision_config
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    grid = torch.tensor([[1, 4, 4]])
    return {"pixel_values": torch.randn(16, width, generator=generator), "image_grid_thw": grid}


def _qwen_vl_tokens(config: object, inputs: dict[str, torch.Tensor]) -> list[int]:
    """One token per merged patch group: t * h * w / merge**2 (Qwen2VLProcessor's expansion)."""
    merge = config.vision_config.spatial_merge_size
    return (inputs["image_grid_thw"].prod(-1) // merge**2).tolist()


_QWEN_KEYS = ("pixel_values", "image_grid_thw")
SERVED = {
    "llava": ImageFamily("llava", ("pixel_values",), _llava_tokens, _llava_probe),
    "qwen2_vl": ImageFamily("qwen2_vl", _QWEN_KEYS, _qwen_vl_tokens, _qwen_vl_probe, mrope=True),
    "qwen2_5_vl": ImageFamily("qwen2_5_vl", _QWEN_KEYS, _qwen_vl_tokens, _qwen_vl_probe, mrope=True),
}

_CAUSAL = "the engine's paged attention is causal"
REFUSED = {
    "gemma3": "its image tokens attend to each other in both directions (token_type_ids make the mask "
    f"bidirectional inside an image); {_CAUSAL}",
    "qwen3_vl": "its M-RoPE (3-D positions) and DeepStack features added inside the language model's layers "
    "are not implemented by the engine yet",
    "llava_next": "its images are tiled at any resolution (image_sizes -> a variable token count with "
    "image_newline rows) and the engine does not count those tokens yet",
    "llava_onevision": "its images are tiled at any resolution and the engine does not count those tokens yet",
    "idefics3": "its processor expands an image into tiles with row/column and global-image tokens, which the "
    "engine does not reproduce yet",
    "smolvlm": "its processor expands an image into tiles with row/column and global-image tokens, which the "
    "engine does not reproduce yet",
    "mistral3": "its Pixtral vision tower takes image_sizes and breaks rows with [IMG_BREAK] tokens, which "
    "the engine does not count yet",
    "pixtral": "its vision tower breaks rows with [IMG_BREAK] tokens, which the engine does not count yet",
}
# Inputs the engine takes none of yet, refused by name wherever a prompt names them.
UNSUPPORTED_MODALITIES = ("video", "audio")


def served_family(config: object) -> ImageFamily:
    """The family of an image-text-to-text config; ValueError naming the model type and the cause if refused."""
    model_type = getattr(config, "model_type", "?")
    family = SERVED.get(model_type)
    if family is not None:
        return family
    cause = REFUSED.get(model_type, "it is not among the families the engine has made exact")
    raise ValueError(
        f"image-text-to-text model_type {model_type!r} is not served: {cause} (served: {', '.join(SERVED)})"
    )
