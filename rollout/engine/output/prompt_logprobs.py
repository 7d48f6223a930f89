"""Prompt logprobs: every prompt token's logprob under the model given the tokens before it (vLLM's shape).

Entry j (j >= 1) comes from the logits at position j - 1, so the positions whose logits are kept
are those a request's first sequence computes while its prompt logprobs are incomplete. Blocks
served from the prefix cache were never run through the model this time, so such a request skips
reading the cache (as vLLM does) and computes every position; its blocks still enter the cache for
others. Chunked prefill and preemption just continue from the next missing entry. The logprobs are
the fp32 log-softmax of the model's own logits (vLLM's prompt logprobs): no penalty, temperature or filter;
under a "*_logits" logprobs mode, the fp32 logits themselves (vLLM's too).
"""

from __future__ import annotations

import torch

from rollout.engine.requests.request import Request, Sequence
from rollout.logprobs import Logprob
from rollout.ops.host_to_device import to_device
from rollout.sampling_params.logprobs_modes import is_logits


def needs_prompt_logits(seq: Sequence) -> bool:
    collected = seq.request.prompt_logprobs
    return collected is not None and len(collected) < seq.num_prompt_tokens


def prompt_positions(seq: Sequence, num_new_tokens: int) -> range:
    """Positions computed this step (from seq.num_computed_tokens) whose logits give missing entries."""
    if not needs_prompt_logits(seq):
        return range(0)
    start = seq.num_computed_tokens
    first_missing = len(seq.request.prompt_logprobs) - 1
    return range(max(start, first_missing), min(start + num_new_tokens, seq.num_prompt_tokens - 1))


def collect(request: Request, logits: torch.Tensor, positions: range) -> None:
    """Appends the entries for `positions` from their logits [len(positions), vocab] (fp32)."""
    assert positions.start == len(request.prompt_logprobs) - 1, "prompt logprobs are collected in order"
    logprobs = (
        logits.float()
        if is_logits(request.params.logprobs_mode or "")
        else torch.log_softmax(logits.float(), -1)
    )
    targets = request.prompt_token_ids[positions.start + 1 : positions.stop + 1]
    chosen = logprobs.gather(1, to_device(targets, torch.int64, logprobs.device)[:, None])
    # vLLM's rank: the number of tokens valued >= the prompt token's (its top-k rank when among them)
    ranks = [int(r) for r in torch.ge(logprobs, chosen, out=torch.empty_like(logprobs)).sum(dim=-1).tolist()]
    k = request.params.prompt_logprobs
    top = logprobs.topk(k) if k else None
    none: list[list] = [[] for _ in targets]
    top_ids, top_values = (top.indices.tolist(), top.values.tolist()) if top is not None else (none, none)
    for i, (token, value) in enumerate(zip(targets, chosen[:, 0].tolist(), strict=True)):
        request.prompt_logprobs.append(_entry(token, Logprob(value, ranks[i]), top_ids[i], top_values[i]))


def _entry(token: int, own: Logprob, top_ids: list[int], top_values: list[float]) -> dict[int, Logprob]:
    """vLLM's dict for one position (vllm/logprobs.py, append_logprobs_for_next_position): the prompt token's
    own entry first, then the top k with ranks 1..k; a prompt token among the top k keeps its first place and
    takes its top-k entry (vLLM's second insert overwrites the value, not the key's place): k or k + 1 keys."""
    entry = {token: own}
    for j, (tok, value) in enumerate(zip(top_ids, top_values, strict=True)):
        entry[tok] = Logprob(value, j + 1)
    return entry


def take_rows(logits: torch.Tensor, items: list[tuple[Request, range, bool]]) -> torch.Tensor:
    """Collects each scheduled item's prompt-logprob rows, which precede its sampling row (input_batch.py);
    `items`: (request, positions whose rows these are, whether a sampling row follows). Returns the
    sampling rows."""
    row, keep = 0, []
    for request, positions, samples in items:
        if positions:
            collect(request, logits[row : row + len(positions)], positions)
            row += len(positions)
        if samples:
            keep.append(row)
            row += 1
    return logits.index_select(0, to_device(keep, torch.int64, logits.device))


def complete_prompt_logprobs(request: Request) -> list[dict[int, float] | None] | None:
    """The request's prompt logprobs once every prompt token has its entry, else None."""
    collected = request.prompt_logprobs
    if collected is None or len(collected) < len(request.prompt_token_ids):
        return None
    return list(collected)
