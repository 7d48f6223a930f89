"""The logits processors of one step as a batch: flat indices into the [R, vocab] logits, built once.

Flat index row * vocab + token names one logit. The host walks the rows once and lists, per processor,
the logits it touches and the value it adds or writes there; the device then runs a fixed number of
ops whatever the number of rows (on a GPU a fixed number of launches and copies, no host sync), as
vLLM v1 batches its processors. Each logit goes through the same fp32 (fp64 for the repetition
penalty) operations a row-by-row loop does, in the same order, so the result is the same bit for bit.
The penalties read each row's token counts (token_counts.py), which a sequence keeps from step to step.
"""

from __future__ import annotations

import array
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from itertools import chain

import torch

from rollout.engine.sample.logits_processors import banned_token_ids
from rollout.engine.sample.token_counts import TokenCounts, needs_token_counts

_NEG_INF = float("-inf")
_FP32_MAX = torch.finfo(torch.float32).max


@dataclass(slots=True)
class ProcessorBatch:
    """What each processor does, in the order applied; None where no row asks for it.

    An `_at` tensor holds flat indices; those that add (`index_add_`) are unique, so each logit gets one
    fp32 addition, exactly `logit += value` or `logit -= -value`."""

    bias_at: torch.Tensor | None = None  # [B] int64: logit_bias ids (a dict's keys: unique per row)
    bias: torch.Tensor | None = None  # [B] fp32
    repeated_at: torch.Tensor | None = None  # [P] int64: each row's distinct prompt and output tokens
    repetition_penalty: torch.Tensor | None = None  # [P] fp64
    output_at: torch.Tensor | None = None  # [Q] int64: distinct output tokens of penalized rows
    minus_frequency: torch.Tensor | None = None  # [Q] fp32: -(frequency_penalty * count)
    minus_presence: torch.Tensor | None = None  # [Q] fp32: -presence_penalty
    banned_at: torch.Tensor | None = None  # [N] int64: bad_words' last tokens, min_tokens' stop tokens
    allowed_rows: torch.Tensor | None = None  # [A] int64: rows with allowed_token_ids
    allowed_at: torch.Tensor | None = None  # [M] int64: their allowed tokens

    def apply(self, logits: torch.Tensor) -> None:
        """logits: [R, vocab] fp32, contiguous, written in place (a copy the caller owns)."""
        flat = logits.view(-1)
        if self.bias_at is not None:
            flat.index_add_(0, self.bias_at, self.bias)
        if self.repeated_at is not None:  # transformers' rule in fp64 (1e-300 is 0 in fp32), clamped
            seen = flat[self.repeated_at].double()
            penalty = self.repetition_penalty
            penalized = torch.where(seen > 0, seen / penalty, seen * penalty)
            flat[self.repeated_at] = penalized.clamp(min=-_FP32_MAX, max=_FP32_MAX).to(flat.dtype)
        if self.output_at is not None:  # vLLM: frequency then presence, each in the logits' dtype
            flat.index_add_(0, self.output_at, self.minus_frequency)
            flat.index_add_(0, self.output_at, self.minus_presence)
        if self.banned_at is not None:
            flat.index_fill_(0, self.banned_at, _NEG_INF)
        if self.allowed_rows is not None:  # keep the allowed logits (bans included), the rest of the row -inf
            kept = flat[self.allowed_at]
            logits.index_fill_(0, self.allowed_rows, _NEG_INF)
            flat[self.allowed_at] = kept


def processor_batch(
    rows: list, vocab: int, eos_token_ids: frozenset[int], device: torch.device
) -> ProcessorBatch | None:
    """The step's processors on `device`; None when no row asks for one (nothing to copy or run)."""
    if not any(row.params.processes_logits or row.params.repetition_penalty != 1.0 for row in rows):
        return None
    counts = _token_counts(rows)
    host = {
        **_bias(rows, vocab),
        **_repetition(rows, counts, vocab),
        **_frequency_presence(rows, counts, vocab),
        **_bans(rows, vocab, eos_token_ids),
        **_allowed(rows, vocab),
    }
    if not host:
        return None
    return ProcessorBatch(**_to_device(host, device))


def _bias(rows: list, vocab: int) -> dict[str, torch.Tensor]:
    biased = [(i, row.params.logit_bias) for i, row in enumerate(rows) if row.params.logit_bias]
    if not biased:
        return {}
    values = list(chain.from_iterable(bias.values() for _, bias in biased))
    return {"bias_at": _flat_index(biased, vocab), "bias": torch.tensor(values, dtype=torch.float32)}


def _token_counts(rows: list) -> dict[int, TokenCounts]:
    """The penalized rows' counts, brought up to date: the sequence's own, kept from step to step, where
    the row carries them (only the new tokens are counted), else counted from scratch."""
    return {
        i: (row.token_counts if row.token_counts is not None else TokenCounts()).update(
            row.seen_token_ids, row.num_prompt_tokens
        )
        for i, row in enumerate(rows)
        if needs_token_counts(row.params)
    }


def _repetition(rows: list, counts: dict[int, TokenCounts], vocab: int) -> dict[str, torch.Tensor]:
    """Over each row's distinct ids: a repeated id would only write the same value again."""
    penalized = [
        (i, counts[i].seen_ids)
        for i, row in enumerate(rows)
        if row.params.repetition_penalty != 1.0 and counts[i].seen_ids
    ]
    if not penalized:
        return {}
    penalty = torch.tensor([rows[i].params.repetition_penalty for i, _ in penalized], dtype=torch.float64)
    lengths = torch.tensor([len(seen) for _, seen in penalized])
    return {
        "repeated_at": _flat_index(penalized, vocab),
        "repetition_penalty": penalty.repeat_interleave(lengths),
    }


def _frequency_presence(rows: list, counts: dict[int, TokenCounts], vocab: int) -> dict[str, torch.Tensor]:
    """Each distinct output id once (index_add_ then adds once per logit, in any order) with its count."""
    penalized = [
        (i, counts[i])
        for i, row in enumerate(rows)
        if (row.params.frequency_penalty or row.params.presence_penalty) and counts[i].output_ids
    ]
    if not penalized:
        return {}
    lengths = torch.tensor([len(c.output_ids) for _, c in penalized])
    per_row = [(rows[i].params.frequency_penalty, rows[i].params.presence_penalty) for i, _ in penalized]
    frequency, presence = (
        torch.tensor(per_row, dtype=torch.float32).repeat_interleave(lengths, dim=0).unbind(1)
    )
    occurrences = _int64(c.output_counts for _, c in penalized).to(torch.float32)
    return {
        "output_at": _flat_index([(i, c.output_ids) for i, c in penalized], vocab),
        "minus_frequency": -(frequency * occurrences),  # the fp32 product f * count, negated
        "minus_presence": -presence,
    }


def _bans(rows: list, vocab: int, eos_token_ids: frozenset[int]) -> dict[str, torch.Tensor]:
    banned = [
        (i, banned_token_ids(row.params, row.seen_token_ids, row.num_prompt_tokens, eos_token_ids))
        for i, row in enumerate(rows)
        if row.params.bad_words_token_ids or row.params.min_tokens
    ]
    banned = [(i, tokens) for i, tokens in banned if tokens]
    return {"banned_at": _flat_index(banned, vocab)} if banned else {}


def _allowed(rows: list, vocab: int) -> dict[str, torch.Tensor]:
    allowed = [
        (i, row.params.allowed_token_ids)
        for i, row in enumerate(rows)
        if row.params.allowed_token_ids is not None
    ]
    if not allowed:
        return {}
    return {"allowed_rows": torch.tensor([i for i, _ in allowed]), "allowed_at": _flat_index(allowed, vocab)}


def _flat_index(row_tokens: list[tuple[int, Collection[int]]], vocab: int) -> torch.Tensor:
    """[sum of lengths] int64: row * vocab + token for each (row, tokens) pair's tokens, in order; the
    same few host ops for any number of rows."""
    lengths = torch.tensor([len(tokens) for _, tokens in row_tokens])
    first = torch.tensor([i * vocab for i, _ in row_tokens]).repeat_interleave(lengths)
    return _int64(tokens for _, tokens in row_tokens) + first


def _int64(parts: Iterable[Iterable[int]]) -> torch.Tensor:
    """A host int64 tensor of the parts' Python ints, in order, through an array: several times faster
    than torch.tensor(list), and an int64 array part is copied whole."""
    data = array.array("q")
    for part in parts:
        data.extend(part)
    return torch.frombuffer(data, dtype=torch.int64) if data else torch.empty(0, dtype=torch.int64)


def _to_device(host: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """One host-to-device copy per dtype (pinned, non-blocking on CUDA: no sync); views back by name."""
    if device.type == "cpu":
        return host
    on_device = {}
    for dtype in {tensor.dtype for tensor in host.values()}:
        names = [name for name, tensor in host.items() if tensor.dtype == dtype]
        packed = torch.cat([host[name] for name in names])
        packed = (
            packed.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else packed.to(device)
        )
        on_device.update(zip(names, packed.split([host[name].numel() for name in names]), strict=True))
    return on_device
