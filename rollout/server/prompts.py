"""Turning text and chat prompts into token ids, the same way for the server and the CLI.

Text is tokenized exactly as the offline `LLM` does (`tokenizer(text)["input_ids"]`); chat messages
go through the tokenizer's chat template with the generation prompt appended.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

# Fast tokenizers can refuse concurrent use of one instance ("Already borrowed"); RPC threads share it.
_TOKENIZER_LOCK = threading.Lock()


class NoChatTemplateError(ValueError):
    """Chat messages were given but the tokenizer has no chat template."""


def tokenize_text(tokenizer: Any, text: str) -> list[int]:
    if tokenizer is None:
        raise ValueError("text prompts need a tokenizer, and the model has none; send token ids")
    with _TOKENIZER_LOCK:
        return list(tokenizer(text)["input_ids"])


def render_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> str:
    """The chat template applied to `messages`, ending with the assistant's generation prompt."""
    if tokenizer is None:
        raise ValueError("chat messages need a tokenizer, and the model has none; send token ids")
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplateError(
            "messages: the tokenizer has no chat template; send plain text or token ids instead"
        )
    with _TOKENIZER_LOCK:
        return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)


def tokenize_chat(tokenizer: Any, messages: Sequence[dict[str, str]]) -> tuple[list[int], str]:
    """Token ids and rendered text of a chat; the template already holds any special tokens."""
    text = render_chat(tokenizer, messages)
    with _TOKENIZER_LOCK:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]), text
