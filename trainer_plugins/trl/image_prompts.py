"""GRPOTrainer's VLM path on a rollout server: each unique prompt's images travel with its ids.

TRL renders an image prompt with its processor (`_tokenize_prompts`: placeholders already expanded, the
images taken from the messages); the server takes such ids with the images as vLLM's prompt dict and
runs the model's vision encoder itself, so the samples' logprobs are those of the trainer's own forward
on the processor's inputs. Image rounds are generated when asked for, never ahead (async_rounds.py).
"""

from __future__ import annotations

from typing import Any


def has_images(images: list | None) -> bool:
    return images is not None and any(image is not None for image in images)


def with_images(unique_prompts: list[list[int]], images: list, n: int) -> list[Any]:
    """`unique_prompts` (every n-th of the gathered batch) as prompt dicts where `images` (the gathered
    per-prompt image lists) has images; plain ids otherwise."""
    out: list[Any] = []
    for ids, prompt_images in zip(unique_prompts, images[::n], strict=True):
        if prompt_images:
            out.append({"prompt": ids, "multi_modal_data": {"image": list(prompt_images)}})
        else:
            out.append(ids)
    return out
