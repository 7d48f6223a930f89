"""Turning text and chat prompts into token ids, the same way for the server and the CLI.

Text is tokenized exactly as the offline `LLM` does (`tokenizer(text)["input_ids"]`, one BOS when the
text already starts with it); chat messages go through the tokenizer's chat template with the
generation prompt appended, and tokenize to the ids `apply_chat_template` gives. The work is bounded
before it starts: no vocabulary token covers more than `max_token_chars` characters, so a text longer
than that times the context length cannot fit and is refused without being tokenized.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jinja2 import TemplateError

# Fast tokenizers can refuse concurrent use of one instance ("Already borrowed"); RPC threads share it.
from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK as _TOKENIZER_LOCK
from rollout.sampling_params.field_checks import check_unicode


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


def tokenize_text(
    tokenizer: Any,
    text: str,
    max_chars: int | None = None,
    field: str = "text",
    encode_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """`tokenizer(text, **encode_kwargs)`, with one BOS, not two, when the text already starts with it.

    A chat template rendered to text usually begins with the BOS token, and the tokenizer adds its
    own in front: the model would see a prompt it was never trained on (vLLM drops the duplicate).
    `encode_kwargs`: vLLM's tokenization_kwargs as tokenizer keywords (inputs/tokenization_kwargs.py).
    """
    if tokenizer is None:
        raise ValueError("text prompts need a tokenizer, and the model has none; send token ids")
    check_text_chars(len(text), max_chars, field)
    check_unicode(field, text)
    with _TOKENIZER_LOCK:
        ids = list(tokenizer(text, **(encode_kwargs or {}))["input_ids"])
    bos, bos_id = getattr(tokenizer, "bos_token", None), getattr(tokenizer, "bos_token_id", None)
    if bos and bos_id is not None and text.startswith(bos) and ids[:2] == [bos_id, bos_id]:
        del ids[0]
    return ids


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    max_chars: int | None = None,
    tools: list | None = None,
    add_generation_prompt: bool = True,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The chat template applied to `messages` (and `tools`), ending with the assistant's generation prompt
    (unless `add_generation_prompt` is False). `template_kwargs`: more of `apply_chat_template`'s keywords
    (rollout/inputs/chat_template_options.py: `chat_template`, `continue_final_message`, template variables).

    Messages go to the template as they are (JSON values, see chat_messages.py): tool calls, tool
    results, names, content parts and reasoning reach it intact.
    """
    if tokenizer is None:
        raise ValueError("chat messages need a tokenizer, and the model has none; send token ids")
    extra = dict(template_kwargs or {})
    add_generation_prompt = extra.pop("add_generation_prompt", add_generation_prompt)
    if not (extra.get("chat_template") or getattr(tokenizer, "chat_template", None)):
        raise NoChatTemplateError(
            "messages: the tokenizer has no chat template; send plain text or token ids instead"
        )
    content = (m.get("content") for m in messages)
    check_text_chars(sum(len(c) for c in content if isinstance(c, str)), max_chars, "messages")
    with _TOKENIZER_LOCK:
        try:
            return tokenizer.apply_chat_template(
                list(messages),
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **extra,
            )
        except TemplateError as exc:  # the template's own check of the messages (raise_exception)
            raise ValueError(f"messages: the chat template refused them: {exc}") from None


def tokenize_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    max_chars: int | None = None,
    tools: list | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> tuple[list[int], str]:
    """Token ids and rendered text of a chat: the ids `tokenizer.apply_chat_template` gives, since
    the template already holds any special tokens (none are added)."""
    text = render_chat(tokenizer, messages, max_chars, tools, template_kwargs=template_kwargs)
    check_text_chars(len(text), max_chars, "messages")
    with _TOKENIZER_LOCK:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]), text


def detokenize(tokenizer: Any, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    """Output text as the offline engine writes it (special tokens skipped unless told otherwise)."""
    with _TOKENIZER_LOCK:
        return tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)


def token_texts(tokenizer: Any, token_ids: Sequence[int]) -> list[str]:
    """Each token's own text (special tokens spelled out), as OpenAI's logprobs entries name them."""
    with _TOKENIZER_LOCK:
        return tokenizer.batch_decode([[t] for t in token_ids], skip_special_tokens=False)


def tokenize_rendered(tokenizer: Any, text: str) -> list[int]:
    """Ids of text a chat template rendered: it holds its own special tokens, so none are added."""
    with _TOKENIZER_LOCK:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
