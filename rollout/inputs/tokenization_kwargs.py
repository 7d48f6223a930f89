"""vLLM's `tokenization_kwargs` (LLM.generate / LLM.chat): how prompt text becomes ids, and the checks every
prompt's ids then pass (vllm/renderers/params.py, TokenizeParams.with_kwargs / get_encode_kwargs /
apply_post_tokenization; renderers/base.py, _tokenize_singleton_prompt).

Keys and precedence as vLLM: `add_special_tokens` (default True for generate, False for chat: the template
holds them), `max_length` (the most prompt tokens, default max_model_len: longer is an error),
`truncation` (True / "longest_first": keep `max_length` tokens; False / "do_not_truncate": none),
`truncate_prompt_tokens` (tokens to keep, -1: `max_length`), `padding="max_length"` / `pad_prompt_tokens`
(pad with the pad token), `do_lower_case`, `needs_detokenization`. Text goes through the tokenizer with
vLLM's encode keywords (so its truncation_side and special tokens apply); token-id prompts get the same
padding, truncation (the tokenizer's truncation_side) and length check. vLLM warns and ignores other keys;
rollout refuses them by name. Without `tokenization_kwargs` nothing here runs (rollout's usual tokenizing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollout.protocol.prompts import tokenize_text

_KEYS = (
    "add_special_tokens",
    "max_length",
    "truncation",
    "truncate_prompt_tokens",
    "padding",
    "pad_prompt_tokens",
    "do_lower_case",
    "needs_detokenization",
)


@dataclass(frozen=True)
class TokenizationOptions:
    """One call's resolved `tokenization_kwargs` (vLLM's TokenizeParams after with_kwargs)."""

    max_input_tokens: int
    add_special_tokens: bool
    truncate_prompt_tokens: int | None = None
    pad_prompt_tokens: int | None = None
    do_lower_case: bool = False
    needs_detokenization: bool = False

    def encode_kwargs(self) -> dict[str, Any]:
        """The keywords for the tokenizer call (vLLM's get_encode_kwargs): without truncation, one token
        past the limit is enough to refuse the prompt."""
        keep = self._keep()
        return {
            "add_special_tokens": self.add_special_tokens,
            "truncation": True,
            "max_length": keep if keep is not None else self.max_input_tokens + 1,
        }

    def text(self, text: str) -> str:
        return text.lower() if self.do_lower_case else text

    def ids(self, tokenizer: Any, ids: list[int], field: str) -> list[int]:
        """Padding, truncation and the length check, in vLLM's order (apply_post_tokenization)."""
        ids = self._padded(tokenizer, ids, field)
        keep = self._keep()
        if keep is not None and keep < len(ids):
            left = getattr(tokenizer, "truncation_side", "left") == "left"
            ids = ids[len(ids) - keep :] if left else ids[:keep]
        if len(ids) > self.max_input_tokens:
            raise ValueError(
                f"{field}: {len(ids)} prompt tokens, more than tokenization_kwargs allow "
                f"({self.max_input_tokens}: max_length, else max_model_len); set truncation=True to keep "
                "the first max_length tokens, or shorten the prompt; nothing was generated"
            )
        return ids

    def _keep(self) -> int | None:
        keep = self.truncate_prompt_tokens
        return self.max_input_tokens if keep == -1 else keep

    def _padded(self, tokenizer: Any, ids: list[int], field: str) -> list[int]:
        length = self.max_input_tokens if self.pad_prompt_tokens == -1 else self.pad_prompt_tokens
        if length is None or length <= len(ids):
            return ids
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            raise ValueError(
                f"{field}: tokenization_kwargs pad the prompt, but the tokenizer has no pad token"
            )
        return ids + [pad] * (length - len(ids))


def tokenization_options(
    kwargs: Mapping[str, Any] | None, *, chat: bool, max_model_len: int
) -> TokenizationOptions | None:
    """`kwargs` resolved against vLLM's defaults (None: none given); ValueError names a bad key."""
    if kwargs is None:
        return None
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"tokenization_kwargs must be a dict, got {type(kwargs).__name__}")
    unknown = sorted(set(kwargs) - set(_KEYS), key=str)
    if unknown:
        raise ValueError(
            f"tokenization_kwargs.{unknown[0]}: not supported (vLLM ignores it with a warning; rollout "
            f"refuses it); the keys are {', '.join(_KEYS)}"
        )
    max_length = _int(kwargs, "max_length", max_model_len, minimum=1)
    if max_length > max_model_len:
        raise ValueError(
            f"tokenization_kwargs.max_length: {max_length} is more than max_model_len ({max_model_len})"
        )
    keep = _int(kwargs, "truncate_prompt_tokens", None, minimum=-1)
    keep = _truncation(kwargs.get("truncation"), max_length, keep)
    if keep is not None and keep > max_length:
        raise ValueError(
            f"tokenization_kwargs.truncate_prompt_tokens: {keep} is more than max_length ({max_length})"
        )
    return TokenizationOptions(
        max_input_tokens=max_length,
        add_special_tokens=_bool(kwargs, "add_special_tokens", not chat),
        truncate_prompt_tokens=keep,
        pad_prompt_tokens=_padding(kwargs, max_length),
        do_lower_case=_bool(kwargs, "do_lower_case", False),
        needs_detokenization=_bool(kwargs, "needs_detokenization", False),
    )


def _truncation(value: object, max_length: int, keep: int | None) -> int | None:
    """vLLM reads `truncation` only when truthy (False leaves truncate_prompt_tokens as given)."""
    if not value:
        return keep
    if value is True or value == "longest_first":
        return max_length
    if value == "do_not_truncate":
        return None
    raise ValueError(
        f"tokenization_kwargs.truncation: {value!r} is not supported; use True / 'longest_first' or "
        "'do_not_truncate'"
    )


def _padding(kwargs: Mapping[str, Any], max_length: int) -> int | None:
    """`padding` as vLLM reads it (only when truthy), else `pad_prompt_tokens` (-1: max_length)."""
    length = _int(kwargs, "pad_prompt_tokens", None, minimum=-1)
    value = kwargs.get("padding")
    if not value:
        return length
    if value == "max_length":
        return max_length
    if value == "do_not_pad":
        return None
    raise ValueError(
        f"tokenization_kwargs.padding: {value!r} is not supported; use 'max_length' or 'do_not_pad'"
    )


def _int(kwargs: Mapping[str, Any], key: str, default: int | None, minimum: int) -> int | None:
    value = kwargs.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"tokenization_kwargs.{key} must be an integer >= {minimum}, got {value!r}")
    return value


def _bool(kwargs: Mapping[str, Any], key: str, default: bool) -> bool:
    value = kwargs.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"tokenization_kwargs.{key} must be a bool, got {value!r}")
    return value


def encode_prompt(
    tokenizer: Any,
    text: str | None,
    ids: list[int] | None,
    options: TokenizationOptions,
    max_chars: int | None,
    field: str,
) -> list[int]:
    """A prompt's ids under `options`: text (lower-cased if asked) through the tokenizer with vLLM's encode
    keywords, or the given ids; then padding, truncation and the length check."""
    if ids is None:
        encoded = tokenize_text(
            tokenizer, options.text(text or ""), max_chars, field, options.encode_kwargs()
        )
        return options.ids(tokenizer, encoded, field)
    return options.ids(tokenizer, list(ids), field)
