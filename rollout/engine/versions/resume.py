"""Lossless resume: a request may continue a partial sample (returned by an abort) under the current
weights. The partial's tokens join the sequence as output tokens already generated, with their
logprobs and version spans, so `max_tokens` counts them and the prompt + partial completion is
computed once (reusing cached blocks of the current version) before sampling goes on.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rollout.engine.versions.provenance import check_spans
from rollout.outputs import PartialSample
from rollout.sampling_params import SamplingParams

if TYPE_CHECKING:
    from rollout.engine.requests.request import Sequence


def check_partial(
    partial: PartialSample,
    params: SamplingParams,
    num_prompt_tokens: int,
    eos_token_ids: frozenset[int],
    vocab_size: int,
    max_model_len: int,
) -> None:
    """Raises ValueError naming the field when `partial` cannot be resumed with `params`."""
    if not isinstance(partial, PartialSample):
        raise ValueError(f"resume must be a PartialSample, got {type(partial).__name__}")
    if params.n != 1:
        raise ValueError(f"n must be 1 to resume a partial sample, got {params.n}")
    if isinstance(partial.index, bool) or not isinstance(partial.index, int) or partial.index < 0:
        raise ValueError(f"resume.index must be a non-negative integer, got {partial.index!r}")
    tokens = partial.token_ids
    if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size for t in tokens):
        raise ValueError(f"resume.token_ids must be token ids in [0, {vocab_size})")
    if len(tokens) >= params.max_tokens:
        raise ValueError(
            f"max_tokens ({params.max_tokens}) counts the partial sample's {len(tokens)} tokens: nothing is left"
        )
    if num_prompt_tokens + len(tokens) >= max_model_len:
        raise ValueError(f"resume: prompt + partial sample fill the context ({max_model_len} tokens)")
    stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else eos_token_ids)
    if tokens and tokens[-1] in stop_ids:
        raise ValueError("resume.token_ids ends with a stop token: the sample already finished")
    if params.logprobs is not None and (partial.logprobs is None or len(partial.logprobs) != len(tokens)):
        raise ValueError("resume.logprobs: one per token is needed when the request asks for logprobs")
    if params.logprobs and (partial.top_logprobs is None or len(partial.top_logprobs) != len(tokens)):
        raise ValueError(
            "resume.top_logprobs: one per token is needed when the request asks for logprobs > 0"
        )
    if params.logprobs is not None and (
        partial.kept_log_mass is None or len(partial.kept_log_mass) != len(tokens)
    ):
        raise ValueError("resume.kept_log_mass: one per token is needed when the request asks for logprobs")
    if params.return_kept_tokens and (
        partial.kept_token_ids is None or len(partial.kept_token_ids) != len(tokens)
    ):
        raise ValueError(
            "resume.kept_token_ids: one per token is needed when the request asks for return_kept_tokens"
        )
    _check_log_probabilities(partial, vocab_size)
    check_spans("resume.weight_versions", partial.weight_versions, len(tokens))
    check_spans("resume.kv_versions", partial.kv_versions, len(tokens))


def _check_log_probabilities(partial: PartialSample, vocab_size: int) -> None:
    """Values the engine could have produced, else ValueError: they come back as the sample's own.

    A sampled token and a kept mass have probability in (0, 1]: finite and <= 0. A top-k alternative
    may be -inf (a token the filters dropped), never NaN or above 0, and names a token id.
    """
    for name, values in (("logprobs", partial.logprobs), ("kept_log_mass", partial.kept_log_mass)):
        for i, value in enumerate(values or []):
            if not (math.isfinite(value) and value <= 0.0):
                raise ValueError(f"resume.{name}[{i}] must be a finite log probability <= 0, got {value}")
    for i, position in enumerate(partial.top_logprobs or []):
        for token, value in position.items():
            if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
                raise ValueError(f"resume.top_logprobs[{i}]: token id {token!r} is outside [0, {vocab_size})")
            if math.isnan(value) or value > 0.0:
                raise ValueError(
                    f"resume.top_logprobs[{i}][{token}] must be a log probability <= 0, got {value}"
                )


def resume_into(seq: Sequence, partial: PartialSample) -> None:
    """Appends the partial sample's tokens, logprobs and spans to a fresh sequence of its prompt."""
    seq.token_ids.extend(partial.token_ids)
    seq.logprobs.extend(partial.logprobs or [])
    seq.top_logprobs.extend(partial.top_logprobs or [])
    seq.kept_log_mass.extend(partial.kept_log_mass or [])
    seq.kept_token_ids.extend(partial.kept_token_ids or [])
    seq.weight_versions.extend(
        check_spans("weight_versions", partial.weight_versions, len(partial.token_ids))
    )
    seq.kv_versions.extend(check_spans("kv_versions", partial.kv_versions, len(partial.token_ids)))
