"""A finished sample's text, and the cut at the first stop string, from its token ids.

The one place that turns a finished `CompletionOutput` into what the caller sees: its `text` (vLLM's
incremental detokenization), and when a stop string completed at token k, the sample ends at k:
`token_ids` and every per-token list are cut to k + 1 (tokens the engine sampled after it are
dropped), `finish_reason` "stop", `stop_reason` the string. The server runs it on its RPC threads
(the engine loop never tokenizes), the offline engine in its own thread with the text it kept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rollout.detokenize.sample_text import SampleText
from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.outputs import CompletionOutput
from rollout.sampling_params import SamplingParams


def finish_text(
    sample: CompletionOutput,
    tokenizer: Any,
    prompt_ids: list[int],
    params: SamplingParams,
    state: SampleText | None = None,
) -> CompletionOutput:
    """`sample` with its text and stop string (a new object: the input may be shared between threads).

    `state`: the sample's text so far, when it was kept as the tokens came; else it starts afresh.
    Without a tokenizer, or with `detokenize=False`, the sample is returned as it is (no text).
    """
    if tokenizer is None or not params.detokenize:
        return sample
    token_stop = sample.finish_reason == "stop" and not isinstance(sample.stop_reason, str)
    with TOKENIZER_LOCK:
        state = state or SampleText(tokenizer, prompt_ids, params)
        state.feed(sample.token_ids, stop_token_last=token_stop)
    if state.stop_string is None:
        return dataclasses.replace(sample, text=state.text)
    cut = truncate_completion(sample, state.num_tokens)
    return dataclasses.replace(cut, text=state.text, finish_reason="stop", stop_reason=state.stop_string)


def truncate_completion(sample: CompletionOutput, num_tokens: int) -> CompletionOutput:
    """The sample's first `num_tokens` tokens, with their logprobs, alternatives, kept masses and spans."""
    if num_tokens >= len(sample.token_ids):
        return sample

    def cut(values: list | None) -> list | None:
        return None if values is None else values[:num_tokens]

    logprobs = cut(sample.token_logprobs)
    return dataclasses.replace(
        sample,
        token_ids=sample.token_ids[:num_tokens],
        token_logprobs=logprobs,
        top_logprobs=cut(sample.top_logprobs),
        kept_log_mass=cut(sample.kept_log_mass),
        kept_token_ids=cut(sample.kept_token_ids),
        weight_versions=[s for s in sample.weight_versions if s[0] < num_tokens],
        kv_versions=[s for s in sample.kv_versions if s[0] < num_tokens],
        cumulative_logprob=None if logprobs is None else sum(logprobs),
    )
