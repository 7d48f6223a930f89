"""The offline `LLM`'s image prompts: a list mixing plain prompts and vLLM's dicts with `multi_modal_data`
turned into token ids, texts and each prompt's MultiModalInputs (None for a text prompt), every image
decoded and checked before anything is queued."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rollout.inputs.prompt_inputs import parse_prompt
from rollout.multimodal.chat_images import take_images
from rollout.multimodal.image_parts import ImageLimits
from rollout.multimodal.image_prompt import ImagePrompts
from rollout.multimodal.mm_inputs import MultiModalInputs
from rollout.multimodal.prompt_dicts import has_multi_modal_data, multi_modal_prompt
from rollout.protocol.prompts import tokenize_text


class OfflineLLM(Protocol):
    """What is read of the offline `LLM` (rollout/llm.py, which calls this module)."""

    engine: Any
    tokenizer: Any
    max_prompt_chars: int


def image_prompts(
    llm: OfflineLLM, prompts: Sequence[Any]
) -> tuple[list[list[int]], list[str | None], list[MultiModalInputs | None]]:
    """(token ids, texts, images) per prompt, in order; ValueError naming `prompts[i]...` otherwise."""
    ids: list[list[int]] = []
    texts: list[str | None] = []
    images: list[MultiModalInputs | None] = []

    def tokenize(text: str, field: str) -> list[int]:
        if llm.tokenizer is None:
            raise ValueError(f"{field} is text but the model has no tokenizer; pass token ids")
        return tokenize_text(llm.tokenizer, text, llm.max_prompt_chars, field)

    for i, prompt in enumerate(prompts):
        if has_multi_modal_data(prompt):
            mm, text = multi_modal_prompt(prompt, llm.engine.images, tokenize, f"prompts[{i}]")
            ids.append(mm.prompt_token_ids)
            texts.append(text)
            images.append(mm)
            continue
        parsed = parse_prompt(prompt, f"prompts[{i}]")  # vLLM's forms, as the text path reads them
        ids.append(
            parsed.token_ids if parsed.token_ids is not None else tokenize(parsed.text, f"prompts[{i}]")
        )
        texts.append(parsed.text)
        images.append(None)
    return ids, texts, images


def chat_images(images: ImagePrompts | None, conversation: Any, field: str) -> tuple[Any, list]:
    """`LLM.chat`'s conversation with its image parts taken out (chat_images.py), and the images; a model
    without images keeps them, for message_checks.py to refuse by name."""
    if images is None or not isinstance(conversation, (list, tuple)):
        return conversation, []
    return take_images(conversation, field, ImageLimits(), allow_paths=True)
