"""Which image-text-to-text families the engine serves exactly, and why the others are refused.

A served family says how many tokens each image's features fill (the processor's expansion of its
placeholder) and which processor tensors its vision encoder takes. A refused family is named with the
feature the engine does not implement for it, at load, before anything is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.image_processing_utils import select_best_resolution


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


def _extra_tokens(config: object) -> int:
    """Beyond one per patch: CLIP's class token, less the first token the "default" strategy drops."""
    has_cls = config.vision_config.model_type == "clip_vision_model"
    return int(has_cls) - int(config.vision_feature_select_strategy == "default")


def _llava_tokens(config: object, inputs: dict[str, torch.Tensor]) -> list[int]:
    pixels = inputs["pixel_values"]  # [num_images, 3, H, W]
    patch = config.vision_config.patch_size
    count = (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch) + _extra_tokens(config)
    return [count] * pixels.shape[0]


def _llava_next_tokens(config: object, inputs: dict[str, torch.Tensor]) -> list[int]:
    """LlavaNextProcessor's count: the base tile's patches, plus the best-resolution grid's patches with the
    padding rows or columns removed, plus one image_newline per remaining row."""
    height, width = inputs["pixel_values"].shape[-2:]  # [num_images, tiles, 3, H, W]
    rows, cols = height // config.vision_config.patch_size, width // config.vision_config.patch_size
    counts = []
    for orig_height, orig_width in inputs["image_sizes"].tolist():
        best_height, best_width = select_best_resolution(
            [orig_height, orig_width], config.image_grid_pinpoints
        )
        current_height, current_width = rows * (best_height // height), cols * (best_width // width)
        if orig_width / orig_height > current_width / current_height:
            new_height = int(round(orig_height * (current_width / orig_width), 7))
            current_height -= (current_height - new_height) // 2 * 2
        else:
            new_width = int(round(orig_width * (current_height / orig_height), 7))
            current_width -= (current_width - new_width) // 2 * 2
        unpadded = current_height * current_width + current_height  # with the newlines
        counts.append(unpadded + rows * cols + _extra_tokens(config))
    return counts


def _llava_probe(config: object, generator: torch.Generator) -> dict[str, torch.Tensor]:
    size = config.vision_config.image_size
    return {"pixel_values": torch.randn(1, 3, size, size, generator=generator)}


def _llava_next_probe(config: object, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One tile-sized image: its base tile and the tiles of the best resolution the pinpoints give it."""
    size = config.vision_config.image_size
    best_height, best_width = select_best_resolution([size, size], config.image_grid_pinpoints)
    tiles = 1 + (best_height // size) * (best_width // size)
    pixels = torch.randn(1, tiles, 3, size, size, generator=generator)
    return {"pixel_values": pixels, "image_sizes": torch.tensor([[size, size]])}


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
    "llava_next": ImageFamily(
        "llava_next", ("pixel_values", "image_sizes"), _llava_next_tokens, _llava_next_probe
    ),
    "qwen2_vl": ImageFamily("qwen2_vl", _QWEN_KEYS, _qwen_vl_tokens, _qwen_vl_probe, mrope=True),
    "qwen2_5_vl": ImageFamily("qwen2_5_vl", _QWEN_KEYS, _qwen_vl_tokens, _qwen_vl_probe, mrope=True),
}

_CAUSAL = "the engine's paged attention is causal"
REFUSED = {
    "gemma3": "its image tokens attend to each other in both directions (token_type_ids make the mask "
    f"bidirectional inside an image); {_CAUSAL}",
    "qwen3_vl": "its M-RoPE (3-D positions) and DeepStack features added inside the language model's layers "
    "are not implemented by the engine yet",
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
