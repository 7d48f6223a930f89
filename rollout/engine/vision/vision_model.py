"""The vision side of an image-text-to-text model: whether a model has one, whether it is served, and the
encoder run (the model's own `get_image_features`, unmodified: vision tower, feature selection, projector).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import AutoConfig, PreTrainedModel

from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.multimodal.families import ImageFamily, served_family
from rollout.multimodal.image_prompt import ImagePrompts
from rollout.multimodal.mm_inputs import MultiModalInputs


def is_image_text_model(model: PreTrainedModel) -> bool:
    return getattr(model.config, "vision_config", None) is not None and hasattr(model, "get_image_features")


def takes_images(path: str | os.PathLike) -> bool:
    """Whether the checkpoint at `path` is an image-text-to-text model (its config has a vision config)."""
    return getattr(AutoConfig.from_pretrained(path), "vision_config", None) is not None


def check_image_model(model: PreTrainedModel) -> ImageFamily | None:
    """The family of an image-text-to-text model (None for a text model); refused by name if not served."""
    if not is_image_text_model(model):
        return None
    try:
        return served_family(model.config)
    except ValueError as exc:
        raise UnsupportedModelError(f"{type(model).__name__}: {exc}") from None


def split_processor(model: PreTrainedModel, processor: Any) -> tuple[Any, ImagePrompts | None]:
    """(tokenizer, image prompt builder) from what was given: a tokenizer, or a processor holding one and an
    image processor (transformers' composite processors, multimodal/processor_parts.py); the builder is
    None for a text model."""
    tokenizer = getattr(processor, "tokenizer", processor)
    if not is_image_text_model(model):
        return tokenizer, None
    return tokenizer, ImagePrompts(model.config, getattr(processor, "image_processor", None), tokenizer)


@torch.inference_mode()
def encode_images(model: PreTrainedModel, encoder_inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Every image's features, concatenated in prompt order: [num_feature_tokens, hidden] in the model's
    dtype, exactly what the model's forward would scatter into the image tokens."""
    device = next(model.parameters()).device
    inputs = {
        name: value.to(device=device, dtype=model.dtype if value.is_floating_point() else value.dtype)
        for name, value in encoder_inputs.items()
    }
    out = model.get_image_features(**inputs, return_dict=True)
    features = getattr(out, "pooler_output", out)
    if isinstance(features, (list, tuple)):
        features = torch.cat([f.reshape(-1, f.shape[-1]) for f in features])
    return features.reshape(-1, features.shape[-1])


def check_multi_modal(
    images: ImagePrompts | None, multi_modal: MultiModalInputs | None, prompt_token_ids: list[int]
) -> MultiModalInputs | None:
    """A request's images, when the model takes them and they belong to its prompt; ValueError otherwise.

    Image placeholder ids without images are refused: they would be read as their text embedding (a
    resumed or re-sent image prompt that lost its images, rollout/resumption.py carries none)."""
    if multi_modal is None:
        if images is not None and images.image_token_id in prompt_token_ids:
            raise ValueError(
                f"prompt_token_ids: hold image placeholder tokens (id {images.image_token_id}) but no images "
                "were given; send the images with the prompt (multi_modal_data)"
            )
        return None
    if images is None:
        raise ValueError(
            "multi_modal_data: this model takes no images (it is not an image-text-to-text model)"
        )
    if multi_modal.prompt_token_ids != prompt_token_ids:
        raise ValueError("multi_modal_data: the images were prepared for another prompt")
    return multi_modal
