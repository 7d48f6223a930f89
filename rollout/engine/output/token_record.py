"""Each output token's record on its sequence: the token, its logprob, kept mass and alternatives, and the
weight versions that made it. Appended once per sampled token; cut back when a sample finishes early at a
given output token, what a stop string found off the engine's thread asks for (the server's detokenizer):
tokens sampled after that token are dropped with their logprobs and spans, so what is returned is exactly
what was sampled up to the stop."""

from __future__ import annotations

from rollout.engine.requests.request import Sequence
from rollout.engine.sample.sampler import SamplerOutput
from rollout.engine.sample.token_counts import TokenCounts
from rollout.engine.versions.provenance import extend_spans


def append_sampled(seq: Sequence, out: SamplerOutput, row: int, weight_version: int) -> None:
    """Appends row `row` of the step's sampler output to `seq`, with what its request asked to keep."""
    extend_spans(seq.weight_versions, seq.num_output_tokens, weight_version)
    extend_spans(seq.kv_versions, seq.num_output_tokens, seq.kv_version)
    seq.token_ids.append(out.token_ids[row])
    if out.logprobs[row] is not None:
        seq.logprobs.append(out.logprobs[row])
        seq.kept_log_mass.append(out.kept_log_masses[row])
    if seq.request.params.return_kept_tokens:
        seq.kept_token_ids.append(out.kept_token_ids[row])
    if out.top_logprobs[row] is not None:
        seq.top_logprobs.append(out.top_logprobs[row])


def truncate_outputs(seq: Sequence, num_output_tokens: int) -> None:
    """Keeps the sequence's first `num_output_tokens` output tokens and everything recorded per token."""
    del seq.token_ids[seq.num_prompt_tokens + num_output_tokens :]
    for per_token in (seq.logprobs, seq.top_logprobs, seq.kept_log_mass, seq.kept_token_ids):
        del per_token[num_output_tokens:]
    seq.weight_versions[:] = [s for s in seq.weight_versions if s[0] < num_output_tokens]
    seq.kv_versions[:] = [s for s in seq.kv_versions if s[0] < num_output_tokens]
    if seq.token_counts is not None:  # counted past the cut: recount from the kept tokens if it samples again
        seq.token_counts = TokenCounts()
