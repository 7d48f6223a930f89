"""Turning text and chat prompts into token ids, the same way for the server and the CLI.

Text is tokenized exactly as the offline `LLM` does (`tokenizer(text)["input_ids"]`); chat messages
go through the tokenizer's chat template with the generation prompt appended. The work is bounded
before it starts: no vocabulary token covers more than `max_token_chars` characters, so a text longer
than that times the context length cannot fit and is refused without being tokenized.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

# Fast tokenizers can refuse concurrent use of one instance ("Already borrowed"); RPC threads share it.
_TOKENIZER_LOCK = threading.Lock()


class NoChatTemplateError(ValueError):
    """Chat messages were given but the tokenizer has no chat template."""


def max_token_chars(tokenizer: Any) -> int:
    """The most characters any vocabulary token (added and special ones included) stands for.

    Byte-level tokens are spelled one character per byte and every input character is at least one
    byte, so a token's spelling is never shorter than the text it covers.
    """
    return max((len(token) for token in tokenizer.get_vocab()), default=1) or 1


def text_char_limit(tokenizer: Any, max_model_len: int) -> int:
    """Texts longer than this have more tokens than the context holds."""
    return max_token_chars(tokenizer) * max_model_len


def check_text_chars(num_chars: int, limit: int | None, field: str) -> None:
    if limit is not None and num_chars > limit:
        raise ValueError(
            f"{field}: {num_chars} characters, more than the {limit} a prompt can have and still fit "
            "the context (max_model_len x the longest vocabulary token); nothing was tokenized"
        )


def tokenize_text(tokenizer: Any, text: str, max_chars: int | None = None) -> list[int]:
    if tokenizer is None:
        raise ValueError("text prompts need a tokenizer, and the model has none; send token ids")
    check_text_chars(len(text), max_chars, "text")
    with _TOKENIZER_LOCK:
        return list(tokenizer(text)["input_ids"])


def render_chat(tokenizer: Any, messages: Sequence[dict[str, str]], max_chars: int | None = None) -> str:
    """The chat template applied to `messages`, ending with the assistant's generation prompt."""
    if tokenizer is None:
        raise ValueError("chat messages need a tokenizer, and the model has none; send token ids")
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplateError(
            "messages: the tokenizer has no chat template; send plain text or token ids instead"
        )
    check_text_chars(sum(len(m.get("content") or "") for m in messages), max_chars, "messages")
    with _TOKENIZER_LOCK:
        return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)


def tokenize_chat(
    tokenizer: Any, messages: Sequence[dict[str, str]], max_chars: int | None = None
) -> tuple[list[int], str]:
    """Token ids and rendered text of a chat; the template already holds any special tokens."""
    text = render_chat(tokenizer, messages, max_chars)
    check_text_chars(len(text), max_chars, "messages")
    with _TOKENIZER_LOCK:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]), text


def detokenize(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """Output text as the offline engine writes it (special tokens skipped)."""
    with _TOKENIZER_LOCK:
        return tokenizer.decode(list(token_ids), skip_special_tokens=True)
