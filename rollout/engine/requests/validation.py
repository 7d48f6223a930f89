"""Whether the engine can take a request: prompt ids, sampling params and a resumed partial, checked
against the model's vocabulary, the context length and the batch size before anything is queued.

Every refusal is a ValueError that names the field, so the server answers INVALID_ARGUMENT with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.engine.sample.bad_words import with_bad_words_tokenized
from rollout.engine.sample.logits_processors import check_against_vocab
from rollout.engine.versions.resume import check_partial
from rollout.outputs import PartialSample
from rollout.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What a request is checked against: the model's and the engine's sizes."""

    vocab_size: int
    max_model_len: int
    max_num_seqs: int
    eos_token_ids: frozenset[int]


def check_request(
    prompt_token_ids: list[int],
    params: SamplingParams,
    resume: PartialSample | None,
    limits: RequestLimits,
    tokenizer: Any | None,
) -> None:
    """Raises ValueError naming the offending field; returns when the engine can run the request."""
    if resume is not None:
        check_partial(
            resume,
            params,
            len(prompt_token_ids),
            limits.eos_token_ids,
            limits.vocab_size,
            limits.max_model_len,
        )
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be SamplingParams, got {type(params).__name__}")
    _check_prompt(prompt_token_ids, limits)
    for token_id in params.stop_token_ids:
        if token_id >= limits.vocab_size:
            raise ValueError(
                f"stop_token_ids: token id {token_id} is outside the vocabulary [0, {limits.vocab_size})"
            )
    if params.stop and tokenizer is None:
        raise ValueError("stop: stop strings are matched on the text, and this model has no tokenizer")
    check_against_vocab(with_bad_words_tokenized(params, tokenizer), limits.vocab_size, limits.eos_token_ids)
    if params.n > limits.max_num_seqs:
        raise ValueError(f"n must be <= max_num_seqs ({limits.max_num_seqs}), got {params.n}")
    if params.logprobs is not None and params.logprobs > limits.vocab_size:
        raise ValueError(
            f"logprobs must be <= the vocabulary size ({limits.vocab_size}), got {params.logprobs}"
        )


def _check_prompt(prompt_token_ids: list[int], limits: RequestLimits) -> None:
    if not isinstance(prompt_token_ids, (list, tuple)) or not prompt_token_ids:
        raise ValueError("prompt_token_ids must be a non-empty list of token ids")
    for token_id in prompt_token_ids:
        if (
            isinstance(token_id, bool)
            or not isinstance(token_id, int)
            or not 0 <= token_id < limits.vocab_size
        ):
            raise ValueError(
                f"prompt_token_ids: token id {token_id!r} is outside the vocabulary [0, {limits.vocab_size})"
            )
    if len(prompt_token_ids) >= limits.max_model_len:
        raise ValueError(
            f"prompt_token_ids: the prompt has {len(prompt_token_ids)} tokens but the context is "
            f"{limits.max_model_len} (max_model_len), so at most {limits.max_model_len - 1} fit"
        )
