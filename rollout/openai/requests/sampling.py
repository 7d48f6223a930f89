"""OpenAI/vLLM request fields -> SamplingParams: every field that exists in SamplingParams is mapped.

Stop strings, min_tokens, presence/frequency penalties and logit_bias are passed through once
SamplingParams has a field of that name (read with dataclasses.fields at import, so they arrive
with no change here); until then a request that sets one to anything but its neutral value is
refused with 400 naming it. `stop` given as token ids maps to stop_token_ids. `bad_words` stay
strings here; prepare.py tokenizes them (the engine loop's thread never tokenizes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rollout.openai.requests.schemas import ChatCompletionRequest, CompletionRequest, SamplingFields
from rollout.openai.requests.structured_fields import structured_outputs_of
from rollout.sampling_params import SamplingParams

PARAM_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))
# Fields SamplingParams may not have yet (issue 30), with the value that changes nothing.
PENDING_FIELDS: dict[str, Any] = {
    "stop": None,
    "min_tokens": 0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "logit_bias": None,
    "include_stop_str_in_output": False,
}


class UnsupportedFieldError(ValueError):
    """A request field this server cannot honour yet (400 naming it)."""


def sampling_params(
    request: CompletionRequest | ChatCompletionRequest, prompt_len: int, max_model_len: int
) -> SamplingParams:
    """The SamplingParams a request asks for; ValueError naming the field when one is invalid or unsupported.

    Without max_tokens the sample may run to the end of the context, as vLLM's server does.
    """
    kwargs: dict[str, Any] = {
        "n": request.n,
        "max_tokens": _max_tokens(request, prompt_len, max_model_len),
        "ignore_eos": request.ignore_eos,
        "logprobs": _logprobs(request),
    }
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "seed",
        "logprobs_mode",
        "skip_special_tokens",
        "allowed_token_ids",
        "bad_words",
        "bad_words_token_ids",
    ):
        value = getattr(request, name)
        if value is not None:
            kwargs[name] = value
    stop_strings, stop_ids = _split_stop(request.stop)
    kwargs["stop_token_ids"] = tuple(request.stop_token_ids or ()) + tuple(stop_ids)
    pending = {
        "stop": stop_strings or None,
        "min_tokens": request.min_tokens,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
        "logit_bias": _logit_bias(request.logit_bias),
        "include_stop_str_in_output": request.include_stop_str_in_output,
    }
    kwargs.update(_pending_kwargs(pending))
    kwargs["structured_outputs"] = structured_outputs_of(request)
    return SamplingParams(**kwargs)


def _pending_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    kwargs = {}
    for name, value in values.items():
        neutral = PENDING_FIELDS[name]
        if value is None or value == neutral or value == {}:
            continue
        if name not in PARAM_FIELDS:
            raise UnsupportedFieldError(f"{name}: not supported by this server yet")
        kwargs[name] = value
    return kwargs


def _max_tokens(request: SamplingFields, prompt_len: int, max_model_len: int) -> int:
    asked = getattr(request, "max_completion_tokens", None)
    if asked is not None and request.max_tokens is not None and asked != request.max_tokens:
        raise ValueError("max_completion_tokens: differs from max_tokens; give one of them")
    asked = asked if asked is not None else request.max_tokens
    room = max_model_len - prompt_len
    if asked is None:
        return max(room, 1)
    if asked > room:
        raise ValueError(
            f"max_tokens: {asked} more tokens do not fit the context: the prompt has {prompt_len} of "
            f"{max_model_len} (max_model_len), so at most {room}"
        )
    return asked


def _logprobs(request: CompletionRequest | ChatCompletionRequest) -> int | None:
    if isinstance(request, CompletionRequest):
        return request.logprobs
    if request.top_logprobs is not None and not request.logprobs:
        raise ValueError("top_logprobs: needs logprobs=true")
    if not request.logprobs:
        return None
    return request.top_logprobs or 0


def _split_stop(stop: str | list[str] | list[int] | None) -> tuple[list[str], list[int]]:
    if stop is None:
        return [], []
    if isinstance(stop, str):
        return [stop], []
    strings = [s for s in stop if isinstance(s, str)]
    ids = [s for s in stop if isinstance(s, int)]
    return strings, ids


def _logit_bias(bias: dict[str, float] | None) -> dict[int, float] | None:
    if not bias:
        return None
    try:
        return {int(token): float(value) for token, value in bias.items()}
    except ValueError:
        raise ValueError("logit_bias: keys must be token ids (integers as strings)") from None
