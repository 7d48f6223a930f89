"""The logits processors as they ran before batching, one row at a time: the oracle the batched ones
(rollout/engine/sample/processor_batch.py) must equal bit for bit. Copied from logits_processors.py and
sampler.py's _apply_repetition_penalty as of dc7840c; not used by rollout."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rollout.engine.sample.logits_processors import min_tokens_banned
from rollout.sampling_params import SamplingParams

_NEG_INF = float("-inf")
_FP32_MAX = torch.finfo(torch.float32).max


def per_row_processed(logits: torch.Tensor, rows: list, eos_token_ids: frozenset[int]) -> torch.Tensor:
    """logit_bias, the repetition penalty, then frequency/presence penalties and the bans, as the sampler
    applied them before batching (never writes `logits`)."""
    if any(row.params.processes_logits for row in rows):
        logits = _per_row(logits, rows, lambda p: bool(p.logit_bias), _bias_row)
    logits = _apply_repetition_penalty(logits, rows)
    if any(row.params.processes_logits for row in rows):
        logits = _per_row(
            logits,
            rows,
            _penalizes_or_bans,
            lambda r_logits, row: _penalize_and_ban(r_logits, row, eos_token_ids),
        )
    return logits


def _per_row(
    logits: torch.Tensor, rows: list, wants: Callable[[SamplingParams], bool], apply
) -> torch.Tensor:
    active = [i for i, row in enumerate(rows) if wants(row.params)]
    if not active:
        return logits
    logits = logits.clone()
    for i in active:
        apply(logits[i], rows[i])  # in place on the row's view
    return logits


def _bias_row(row_logits: torch.Tensor, row) -> None:
    bias = row.params.logit_bias
    ids = torch.tensor(list(bias), dtype=torch.int64)
    row_logits[ids] += torch.tensor(list(bias.values()), dtype=row_logits.dtype)


def _penalizes_or_bans(p: SamplingParams) -> bool:
    return (
        bool(p.presence_penalty or p.frequency_penalty or p.min_tokens or p.bad_words_token_ids)
        or p.allowed_token_ids is not None
    )


def _penalize_and_ban(row_logits: torch.Tensor, row, eos_token_ids: frozenset[int]) -> None:
    params: SamplingParams = row.params
    output = row.seen_token_ids[row.num_prompt_tokens :]
    if output and (params.frequency_penalty or params.presence_penalty):
        counts = torch.bincount(torch.tensor(output, dtype=torch.int64), minlength=row_logits.shape[0])
        seen = counts.nonzero()[:, 0]
        row_logits[seen] -= params.frequency_penalty * counts[seen].to(row_logits.dtype)
        row_logits[seen] -= params.presence_penalty
    banned = _banned(params, output, eos_token_ids)
    if banned:
        row_logits[torch.tensor(sorted(banned), dtype=torch.int64)] = _NEG_INF
    if params.allowed_token_ids is not None:
        keep = torch.zeros(row_logits.shape[0], dtype=torch.bool)
        keep[torch.tensor(list(params.allowed_token_ids), dtype=torch.int64)] = True
        row_logits.masked_fill_(~keep, _NEG_INF)


def _banned(params: SamplingParams, output: list[int], eos_token_ids: frozenset[int]) -> set[int]:
    banned = set()
    for word in params.bad_words_token_ids:
        prefix = word[:-1]
        if len(prefix) <= len(output) and (not prefix or tuple(output[-len(prefix) :]) == prefix):
            banned.add(word[-1])
    if len(output) < params.min_tokens:
        banned |= min_tokens_banned(params, eos_token_ids)
    return banned


def _apply_repetition_penalty(logits: torch.Tensor, rows: list) -> torch.Tensor:
    if not any(row.params.repetition_penalty != 1.0 for row in rows):
        return logits
    logits = logits.clone()
    for i, row in enumerate(rows):
        penalty = row.params.repetition_penalty
        if penalty != 1.0 and row.seen_token_ids:
            seen = torch.tensor(sorted(set(row.seen_token_ids)), dtype=torch.int64)
            values = logits[i, seen].double()
            penalized = torch.where(values > 0, values / penalty, values * penalty)
            logits[i, seen] = penalized.clamp(min=-_FP32_MAX, max=_FP32_MAX).to(logits.dtype)
    return logits
