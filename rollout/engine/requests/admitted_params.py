"""A request's SamplingParams as the engine runs them: bad_words tokenized, and the logprobs mode the engine
defaults to (EngineConfig.logprobs_mode) written in when the request left it unset, so every row, prompt
logprob and output reads one explicit mode."""

from __future__ import annotations

import dataclasses

from transformers import PreTrainedTokenizerBase

from rollout.engine.sample.bad_words import with_bad_words_tokenized
from rollout.sampling_params import SamplingParams


def admitted_params(
    params: SamplingParams, tokenizer: PreTrainedTokenizerBase | None, default_logprobs_mode: str
) -> SamplingParams:
    params = with_bad_words_tokenized(params, tokenizer)  # the server's RPC threads did it already
    if params.logprobs_mode is None:
        params = dataclasses.replace(params, logprobs_mode=default_logprobs_mode)
    return params
