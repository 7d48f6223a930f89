"""Finishing a sample early at a given output token: what a stop string found off the engine's
thread asks for (the server's detokenizer). Tokens sampled after that token are dropped with their
logprobs and spans, so what is returned is exactly what was sampled up to the stop."""

from __future__ import annotations

from rollout.engine.request import Sequence
from rollout.engine.sample.token_counts import TokenCounts


def truncate_outputs(seq: Sequence, num_output_tokens: int) -> None:
    """Keeps the sequence's first `num_output_tokens` output tokens and everything recorded per token."""
    del seq.token_ids[seq.num_prompt_tokens + num_output_tokens :]
    for per_token in (seq.logprobs, seq.top_logprobs, seq.kept_log_mass, seq.kept_token_ids):
        del per_token[num_output_tokens:]
    seq.weight_versions[:] = [s for s in seq.weight_versions if s[0] < num_output_tokens]
    seq.kv_versions[:] = [s for s in seq.kv_versions if s[0] < num_output_tokens]
    if seq.token_counts is not None:  # counted past the cut: recount from the kept tokens if it samples again
        seq.token_counts = TokenCounts()
