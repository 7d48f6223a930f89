"""Checks and normalises SamplingParams' logits-processor settings (vLLM's names and ranges).

min_tokens, presence/frequency penalties, logit_bias, allowed_token_ids, bad_words and
prompt_logprobs; what needs the model's vocabulary is checked by the engine
(engine/sample/logits_processors.check_against_vocab).
"""

from __future__ import annotations

from typing import Any

from rollout.sampling_params.field_checks import check_finite, check_int, check_unicode

PENALTY_RANGE = (-2.0, 2.0)  # vLLM's and OpenAI's range for presence and frequency penalties


def check_logits_settings(params: Any) -> None:
    """Raises ValueError naming the field; stores the normalised containers on the frozen params."""
    check_int("min_tokens", params.min_tokens, 0)
    if params.min_tokens > params.max_tokens:
        raise ValueError(f"min_tokens must be <= max_tokens ({params.max_tokens}), got {params.min_tokens}")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(params, name)
        check_finite(name, value)
        if not PENALTY_RANGE[0] <= value <= PENALTY_RANGE[1]:
            raise ValueError(f"{name} must be in [-2, 2], got {value}")
    _set(params, "logit_bias", _logit_bias(params.logit_bias))
    _set(params, "allowed_token_ids", _allowed(params.allowed_token_ids))
    _set(params, "bad_words", _bad_words(params.bad_words))
    _set(params, "bad_words_token_ids", _bad_word_ids(params.bad_words_token_ids))
    if params.prompt_logprobs is not None:
        check_int("prompt_logprobs", params.prompt_logprobs, 0)


def has_logits_processors(params: Any) -> bool:
    return bool(
        params.min_tokens
        or params.presence_penalty
        or params.frequency_penalty
        or params.logit_bias
        or params.allowed_token_ids is not None
        or params.bad_words_token_ids
    )


def _logit_bias(bias: object) -> dict[int, float] | None:
    if bias is None:
        return None
    if not isinstance(bias, dict):
        raise ValueError(f"logit_bias must be a dict of token id -> bias, got {type(bias).__name__}")
    out = {}
    for token_id, value in bias.items():
        check_int("logit_bias", token_id, 0)
        check_finite("logit_bias", value)
        out[token_id] = float(value)
    return out or None


def _allowed(ids: object) -> tuple[int, ...] | None:
    if ids is None:
        return None
    ids = _ids("allowed_token_ids", ids)
    if not ids:
        raise ValueError("allowed_token_ids must not be empty (None allows every token)")
    return tuple(dict.fromkeys(ids))


def _bad_words(words: object) -> tuple[str, ...]:
    if isinstance(words, str) or not isinstance(words, (list, tuple)):
        raise ValueError(f"bad_words must be a list of strings, got {words!r}")
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word.strip():
            raise ValueError(f"bad_words: each word must be a non-empty string, got {word!r}")
        check_unicode(f"bad_words[{i}]", word)  # it is tokenized
    return tuple(words)


def _bad_word_ids(sequences: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(sequences, (list, tuple)):
        raise ValueError(f"bad_words_token_ids must be a list of token-id lists, got {sequences!r}")
    out = tuple(_ids("bad_words_token_ids", s) for s in sequences)
    if any(not s for s in out):
        raise ValueError("bad_words_token_ids: each sequence must hold at least one token id")
    return out


def _ids(name: str, ids: object) -> tuple[int, ...]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (list, tuple)):
        raise ValueError(f"{name} must be a list of token ids, got {ids!r}")
    for token_id in ids:
        check_int(name, token_id, 0)
    return tuple(ids)


def _set(params: Any, name: str, value: object) -> None:
    object.__setattr__(params, name, value)
