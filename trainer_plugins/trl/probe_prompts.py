"""The parity probe's prompts: its texts, and for an image-text model one prompt with a real image.

A VLM's vision tower (and projector) shape only the logprobs of tokens after an image: a probe on text
alone passes while the server serves another vision tower. So the probe also renders, with the trainer's
processor as TRL's `_tokenize_prompts` does, a chat turn holding an image drawn here; the server (or the
colocated engine) gets the expanded ids with the image, and the trainer's forward gets the processor's
tensors (pixel_values, image_grid_thw, ...).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from rollout.engine.vision.vision_model import is_image_text_model

logger = logging.getLogger(__name__)

PROBE_TEXTS = ("the quick brown fox: 12+34=46", "rollout parity probe, 7+8=")
IMAGE_QUESTION = "what is in the picture?"
IMAGE_SIZE = 64


@dataclass
class ProbePrompts:
    """What the engine is asked (ids, or vLLM's prompt dict with the image) and the trainer's inputs."""

    prompt_ids: list[list[int]]
    requests: list[Any]
    model_inputs: list[dict[str, torch.Tensor] | None] = field(default_factory=list)


def probe_image() -> Image.Image:
    """A fixed RGB picture (colour gradients and a square) made in code: no file, same on every process."""
    y, x = np.mgrid[0:IMAGE_SIZE, 0:IMAGE_SIZE]
    rgb = np.stack([x * 4, y * 4, (x + y) * 2], axis=-1).astype(np.uint8)
    rgb[16:40, 20:44] = (250, 30, 30)
    return Image.fromarray(rgb, "RGB")


def probe_prompts(processor: Any, model: torch.nn.Module, count: int, fits: int) -> ProbePrompts:
    """`count` text prompts (cycling PROBE_TEXTS, each cut to its last `fits` tokens) and, for an
    image-text model whose processor renders images, one image prompt (whole: cutting it would cut the
    image's tokens)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    texts = [PROBE_TEXTS[i % len(PROBE_TEXTS)] for i in range(count)]
    ids = [tokenizer(text)["input_ids"][-fits:] for text in texts]
    prompts = ProbePrompts(ids, list(ids), [None] * len(ids))
    image = image_prompt(processor, model)
    if image is not None and len(image[0]) > fits:
        logger.warning(
            "parity probe: the image prompt (%d tokens) does not fit the engine's context; text only",
            len(image[0]),
        )
    elif image is not None:
        prompts.prompt_ids.append(image[0])
        prompts.requests.append({"prompt": image[0], "multi_modal_data": {"image": [probe_image()]}})
        prompts.model_inputs.append(image[1])
    return prompts


def image_prompt(processor: Any, model: torch.nn.Module) -> tuple[list[int], dict[str, torch.Tensor]] | None:
    """(expanded prompt ids, the processor's other tensors) for a chat turn with the probe image; None for a
    text model or a processor without an image processor and chat template."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not is_image_text_model(base) or getattr(processor, "image_processor", None) is None:
        return None
    if getattr(processor, "chat_template", None) is None:
        return None
    content = [{"type": "image", "image": probe_image()}, {"type": "text", "text": IMAGE_QUESTION}]
    rendered = processor.apply_chat_template(
        conversation=[[{"role": "user", "content": content}]],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    extras = {k: v for k, v in rendered.items() if k not in ("input_ids", "attention_mask")}
    return rendered["input_ids"][0].tolist(), extras


def forward_inputs(
    model_inputs: dict[str, torch.Tensor] | None, length: int, device: torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor]:
    """The processor's tensors for a teacher-forced forward over `length` tokens: floats in the model's
    dtype, per-token type ids extended over the completion (text tokens: 0), as TRL's forward does."""
    out: dict[str, torch.Tensor] = {}
    for name, value in (model_inputs or {}).items():
        if not isinstance(value, torch.Tensor):
            continue
        if name.endswith("token_type_ids"):
            value = torch.nn.functional.pad(value, (0, length - value.shape[-1]))
        out[name] = value.to(device=device, dtype=dtype if value.is_floating_point() else value.dtype)
    return out
