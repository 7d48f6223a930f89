"""A request's samples as the outputs every caller gets: CompletionOutput per sample, RequestOutput per
request (vLLM's shapes), with the text made here offline or left to the server's RPC threads."""

from __future__ import annotations

from typing import Any

from rollout.detokenize.finish_text import finish_text
from rollout.engine.output.prompt_logprobs import complete_prompt_logprobs
from rollout.engine.requests.request import Request, Sequence
from rollout.engine.versions.provenance import oldest_version
from rollout.outputs import CompletionOutput, RequestOutput


def completion_output(request: Request, seq: Sequence, detokenize: bool, tokenizer: Any) -> CompletionOutput:
    """The sample as it stands (finished, or aborted part-way); `detokenize`: with its text (finish_text)."""
    want = request.params.logprobs is not None
    completion = CompletionOutput(
        index=seq.sample_index,
        token_ids=seq.output_token_ids,
        token_logprobs=list(seq.logprobs) if want else None,
        top_logprobs=list(seq.top_logprobs) if want and request.params.logprobs else None,
        finish_reason=seq.finish_reason or "abort",
        weight_version=oldest_version(seq.weight_versions, default=request.weight_version),
        weight_versions=list(seq.weight_versions),
        kv_versions=list(seq.kv_versions),
        kept_log_mass=list(seq.kept_log_mass) if want else None,
        kept_token_ids=list(seq.kept_token_ids) if request.params.return_kept_tokens else None,
        stop_reason=seq.stop_reason,
        cumulative_logprob=sum(seq.logprobs) if want else None,
        logprobs_mode=request.params.logprobs_mode,
    )
    if not detokenize:  # the server: its RPC threads make the text (finish_text)
        return completion
    return finish_text(completion, tokenizer, request.prompt_token_ids, request.params, seq.text)


def request_output(request: Request, finished: bool = False) -> RequestOutput:
    """The request's output, no samples yet (they are added as they finish), its prompt logprobs once complete."""
    return RequestOutput(
        request.request_id,
        request.prompt_token_ids,
        finished=finished,
        prompt=request.prompt,
        prompt_logprobs=complete_prompt_logprobs(request),
        num_cached_tokens=request.num_cached_tokens,
    )
