"""`LLM.chat`'s conversations to token ids, texts and images, with vLLM's call options: the content format
(content_format.py) and `tokenization_kwargs` (tokenization_kwargs.py) over rollout's rendering."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rollout.inputs.content_format import resolve_content_format, with_content_format
from rollout.inputs.tokenization_kwargs import TokenizationOptions, encode_prompt
from rollout.multimodal.llm_images import OfflineLLM, chat_images
from rollout.multimodal.mm_inputs import MultiModalInputs
from rollout.protocol.chat_messages import conversation_json
from rollout.protocol.prompts import check_text_chars, render_chat, tokenize_chat


def template_content_format(
    tokenizer: Any, value: str | None, chat_template: str | None, tools: Any
) -> str | None:
    """`chat_template_content_format` resolved against the template the conversation renders with."""
    if value != "auto":
        return resolve_content_format(value, None)
    try:
        template = tokenizer.get_chat_template(chat_template, tools=tools) if tokenizer is not None else None
    except ValueError:  # no template: rendering refuses the messages by name
        template = None
    return resolve_content_format(value, template)


def chat_ids(
    tokenizer: Any,
    turns: list[dict[str, Any]],
    field: str,
    max_chars: int | None,
    tools: list | None,
    template_kwargs: Mapping[str, Any],
    content_format: str | None,
    options: TokenizationOptions | None,
) -> tuple[list[int], str]:
    """(ids, rendered text): as `tokenize_chat` without options, else vLLM's encode of the rendered text."""
    turns = with_content_format(turns, content_format, field)
    if options is None:
        return tokenize_chat(tokenizer, turns, max_chars, tools, template_kwargs)
    text = render_chat(tokenizer, turns, max_chars, tools, template_kwargs=template_kwargs)
    check_text_chars(len(text), max_chars, field)
    return encode_prompt(tokenizer, text, None, options, max_chars, field), text


def chat_prompts(
    llm: OfflineLLM,
    conversations: Sequence[Any],
    single: bool,
    tools: list | None,
    template_kwargs: Mapping[str, Any],
    content_format: str | None,
    options: TokenizationOptions | None,
) -> tuple[list[list[int]], list[str], list[MultiModalInputs | None]]:
    """(ids, rendered texts, images) per conversation; ValueError naming `messages[i]...` otherwise."""
    max_chars = llm.max_prompt_chars if llm.tokenizer is not None else None
    token_prompts, texts, images = [], [], []
    for i, conversation in enumerate(conversations):
        field = "messages" if single else f"messages[{i}]"
        conversation, taken = chat_images(llm.engine.images, conversation, field)  # multimodal/llm_images.py
        if taken and options is not None:  # truncating or padding would cut through image placeholders
            raise ValueError(f"tokenization_kwargs: not supported with image parts ({field})")
        turns = conversation_json(conversation, field, images=bool(taken))
        ids, text = chat_ids(
            llm.tokenizer, turns, field, max_chars, tools, template_kwargs, content_format, options
        )
        images.append(llm.engine.images.build(ids, taken, field) if taken else None)
        token_prompts.append(images[-1].prompt_token_ids if taken else ids)  # placeholders expanded
        texts.append(text)
    return token_prompts, texts, images
