"""Which image-text-to-text families the engine serves exactly, and why the others are refused.

A served family says how many tokens each image's features fill (the processor's expansion of its
placeholder) and which processor tensors its vision encoder takes. A refused family is named with the
feature the engine does not implement for it, at load, before anything is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.image_processing_utils import select_best_resolution


@dataclass(frozen=True, slots=True)
class ImageFamily:
    model_type: str
    encoder_keys: tuple[str, ...]  # the processor's tensors `get_image_features` takes
    # (model config, the image processor's outputs) -> each image's number of feature tokens, in order
    tokens_per_image: Callable[[object, dict[str, Any]], list[int]]
    # (model config, generator) -> encoder inputs of one synthetic image, for the load-time self-check
    probe: Callable[[object, torch.Generator], dict[str, torch.Tensor]]
    mrope: bool = False  # 3-D positions (temporal, height, width) from the model's get_rope_index
    # (config, the image processor's outputs, image token id, tokenizer) -> each image's expanded ids, with the
    # family's other tokens (Pixtral's row breaks, Idefics3's tile markers); None: the image token per feature
    layout: Callable[[object, dict[str, Any], int, Any], list[list[int]]] | None = None
    # (config) -> keywords the composite processor gives its image processor (Pixtral's merged patch size)
    image_kwargs: Callable[[object], dict[str, object]] = lambda config: {}


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


def _pixtral_grid(config: object, inputs: dict[str, torch.Tensor]) -> list[tuple[int, int]]:
    """Each image's feature rows and columns: its size over the merged patch (patch x spatial merge)."""
    step = config.vision_config.patch_size * config.spatial_merge_size
    return [(height // step, width // step) for height, width in inputs["image_sizes"].tolist()]


def _mistral3_tokens(config: object, inputs: dict[str, torch.Tensor]) -> list[int]:
    return [rows * cols for rows, cols in _pixtral_grid(config, inputs)]


def _mistral3_layout(config: object, inputs: dict[str, Any], image: int, tokenizer: Any) -> list[list[int]]:
    """PixtralProcessor's expansion: each row's [IMG] tokens then [IMG_BREAK], the last one [IMG_END]."""
    image_break, image_end = tokenizer.convert_tokens_to_ids(["[IMG_BREAK]", "[IMG_END]"])
    layouts = []
    for rows, cols in _pixtral_grid(config, inputs):
        ids = ([image] * cols + [image_break]) * rows
        layouts.append(ids[:-1] + [image_end])
    return layouts


def _mistral3_probe(config: object, generator: torch.Generator) -> dict[str, torch.Tensor]:
    side = 2 * config.vision_config.patch_size * config.spatial_merge_size
    return {
        "pixel_values": torch.randn(1, 3, side, side, generator=generator),
        "image_sizes": torch.tensor([[side, side]]),
    }


def _merged_patch(config: object) -> dict[str, object]:
    return {"patch_size": config.vision_config.patch_size * config.spatial_merge_size}


def _idefics3_seq_len(config: object) -> int:
    """Tokens per tile after the pixel shuffle (Idefics3Processor's image_seq_len, from the config)."""
    vision = config.vision_config
    return int(((vision.image_size // vision.patch_size) ** 2) / (config.scale_factor**2))


def _idefics3_grid(inputs: dict[str, Any]) -> list[tuple[int, int]]:
    """Each image's tile rows and columns (0, 0: not split, only the global image)."""
    rows, cols = inputs.get("rows"), inputs.get("cols")
    if rows is None:
        return [(0, 0)] * inputs["pixel_values"].shape[0]
    flat = [
        (r, c)
        for row_list, col_list in zip(rows, cols, strict=True)
        for r, c in zip(row_list, col_list, strict=True)
    ]
    return flat


def _idefics3_tokens(config: object, inputs: dict[str, Any]) -> list[int]:
    return [(rows * cols + 1) * _idefics3_seq_len(config) for rows, cols in _idefics3_grid(inputs)]


def _idefics3_layout(config: object, inputs: dict[str, Any], image: int, tokenizer: Any) -> list[list[int]]:
    """The processor's own prompt string per image (tile markers, row newlines, the global image), tokenized:
    it starts and ends with special tokens, so it tokenizes alone as it does in the prompt."""
    from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

    spelled = tokenizer.convert_ids_to_tokens(image)
    seq_len = _idefics3_seq_len(config)
    strings = [
        get_image_prompt_string(rows, cols, seq_len, "<fake_token_around_image>", spelled, "<global-img>")
        for rows, cols in _idefics3_grid(inputs)
    ]
    return [list(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in strings]


def _idefics3_probe(config: object, generator: torch.Generator) -> dict[str, torch.Tensor]:
    size = config.vision_config.image_size
    return {"pixel_values": torch.randn(1, 1, 3, size, size, generator=generator)}


def _qwen_vl_tokens(config: object, inputs: dict[str, torch.Tensor]) -> list[int]:
    """One token per merged patch group: t * h * w / merge**2 (Qwen2VLProcessor's expansion)."""
    merge = config.vision_config.spatial_merge_size
    return (inputs["image_grid_thw"].prod(-1) // merge**2).tolist()


_QWEN_KEYS = ("pixel_values", "image_grid_thw")
_IDEFICS_KEYS = ("pixel_values", "pixel_attention_mask")


def _row_col_info(config: object) -> dict[str, object]:
    return {"return_row_col_info": True}  # the tile grid the layout spells (Idefics3Processor asks the same)


SERVED = {
    "llava": ImageFamily("llava", ("pixel_values",), _llava_tokens, _llava_probe),
    "llava_next": ImageFamily(
        "llava_next", ("pixel_values", "image_sizes"), _llava_next_tokens, _llava_next_probe
    ),
    "mistral3": ImageFamily(
        "mistral3",
        ("pixel_values", "image_sizes"),
        _mistral3_tokens,
        _mistral3_probe,
        layout=_mistral3_layout,
        image_kwargs=_merged_patch,
    ),  # fmt: skip
    "idefics3": ImageFamily(
        "idefics3",
        _IDEFICS_KEYS,
        _idefics3_tokens,
        _idefics3_probe,
        layout=_idefics3_layout,
        image_kwargs=_row_col_info,
    ),  # fmt: skip
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
    "smolvlm": "Idefics3's layout would serve it, but SmolVLMProcessor (its oracle) needs num2words and was not "
    "checked against it here",
    "llava/pixtral": "LLaVA over a Pixtral tower (Pixtral-12B) takes image_sizes and breaks rows with [IMG_BREAK] "
    "tokens, which the engine lays out for mistral3 only",
}
# Inputs the engine takes none of yet, refused by name wherever a prompt names them.
UNSUPPORTED_MODALITIES = ("video", "audio")


def served_family(config: object) -> ImageFamily:
    """The family of an image-text-to-text config; ValueError naming the model type and the cause if refused."""
    model_type = getattr(config, "model_type", "?")
    vision_type = getattr(getattr(config, "vision_config", None), "model_type", None)
    if model_type == "llava" and vision_type == "pixtral":
        model_type = "llava/pixtral"  # another tower under the same model type: its own layout
    family = SERVED.get(model_type)
    if family is not None:
        return family
    cause = REFUSED.get(model_type, "it is not among the families the engine has made exact")
    raise ValueError(
        f"image-text-to-text model_type {model_type!r} is not served: {cause} (served: {', '.join(SERVED)})"
    )
