"""vLLM's prompt shape with images: `{"prompt": text or token ids, "multi_modal_data": {"image": img | [imgs]}}`.

(`{"prompt_token_ids": ids, "multi_modal_data": ...}` too, vLLM's TokensPrompt.) Each image may be a PIL
image, encoded bytes, a path or a data URL (image_parts.py). Video and audio are refused by name. The
offline `LLM` calls `multi_modal_prompt` for each prompt dict that carries `multi_modal_data`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rollout.multimodal.families import UNSUPPORTED_MODALITIES
from rollout.multimodal.image_parts import ImageLimits, load_image
from rollout.multimodal.image_prompt import ImagePrompts
from rollout.multimodal.mm_inputs import MultiModalInputs

Tokenize = Callable[[str, str], list[int]]  # (text, field) -> ids


def has_multi_modal_data(prompt: object) -> bool:
    return isinstance(prompt, Mapping) and "multi_modal_data" in prompt


def multi_modal_prompt(
    prompt: Mapping[str, Any],
    images: ImagePrompts | None,
    tokenize: Tokenize,
    field: str,
    limits: ImageLimits | None = None,
) -> tuple[MultiModalInputs, str | None]:
    """The processed prompt and its text (None for token ids); ValueError naming the field otherwise."""
    limits = limits or ImageLimits()
    data = prompt["multi_modal_data"]
    if not isinstance(data, Mapping):
        raise ValueError(f"{field}.multi_modal_data: must be a dict such as {{'image': image}}")
    for modality in data:
        if modality in UNSUPPORTED_MODALITIES:
            raise ValueError(
                f"{field}.multi_modal_data.{modality}: {modality} inputs are not served; only image"
            )
        if modality != "image":
            raise ValueError(
                f"{field}.multi_modal_data.{modality}: unknown modality; the engine takes 'image'"
            )
    if images is None:
        raise ValueError(
            f"{field}.multi_modal_data: this model takes no images (not an image-text-to-text model)"
        )
    loaded = load_images(data.get("image"), f"{field}.multi_modal_data.image", limits)
    ids, text = _prompt_ids(prompt, tokenize, field)
    return images.build(ids, loaded, f"{field}.multi_modal_data.image"), text


def load_images(value: object, field: str, limits: ImageLimits) -> list:
    """One image or a list of them, each decoded and bounded; at most `limits.max_images`."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or value is None:
        raise ValueError(f"{field}: give an image or a non-empty list of images")
    if len(values) > limits.max_images:
        raise ValueError(
            f"{field}: {len(values)} images, more than the {limits.max_images} a prompt may carry "
            "(limit_mm_per_prompt)"
        )
    single = len(values) == 1 and not isinstance(value, (list, tuple))
    return [
        load_image(v, field if single else f"{field}[{i}]", limits, allow_paths=True)
        for i, v in enumerate(values)
    ]


def _prompt_ids(prompt: Mapping[str, Any], tokenize: Tokenize, field: str) -> tuple[list[int], str | None]:
    text = prompt.get("prompt")
    ids = prompt.get("prompt_token_ids")
    if isinstance(text, str) and ids is None:
        return tokenize(text, f"{field}.prompt"), text
    token_ids = ids if ids is not None else text
    if _is_token_ids(token_ids):
        return list(token_ids), None
    raise ValueError(
        f"{field}: a prompt with multi_modal_data needs 'prompt' (text or token ids) or 'prompt_token_ids'"
    )


def _is_token_ids(value: object) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )
