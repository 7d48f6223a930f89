"""Sampler: logits -> tokens and the logprobs of the distribution each token was drawn from.

Order of processing (vLLM's and TRL's expectation): logit bias, repetition, frequency and presence
penalties, the bans (allowed_token_ids, bad_words, min_tokens: logits_processors.py), the structured
outputs' grammar mask (grammar_mask.py), temperature, top-k, top-p, min-p; a row the bans and the
grammar leave without a token is flagged, never drawn from (empty_rows.py). "processed" logprobs are
the fp32 log-softmax after all of it; "raw" ones are the log-softmax of the model's logits before any
of it. Sampling uses the exponential race (argmax p / E with
E ~ Exp(1)), which draws exactly from p and needs no host sync; a seeded row's noise is a function of
(seed, sample index, position) drawn for all rows in one set of ops (sampling_noise.py), so its
tokens do not depend on what else is in the batch or on how the batch was scheduled.

Host work stays flat in the batch size: one call samples the whole step, the processors run a fixed
number of ops in the sampler's own copy of the logits (processor_batch.py), the vocabulary is sorted
only for top-p (top-k uses a partial `topk`; greedy, temperature and min-p sort nothing), an
all-greedy batch draws no noise, and results reach the host in a fixed number of copies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from math import inf
from typing import TYPE_CHECKING

import torch

from rollout.engine.host_to_device import to_device
from rollout.engine.sample.empty_rows import empty_row_indices, guard_empty_rows
from rollout.engine.sample.exponential_race import exponential_race
from rollout.engine.sample.grammar_mask import apply_grammar_masks
from rollout.engine.sample.processor_batch import processor_batch
from rollout.engine.sample.sampling_noise import row_state, sample_key
from rollout.engine.sample.truncation_mass import kept_log_masses, kept_token_ids
from rollout.ops.workspace import Workspace
from rollout.sampling_params import SamplingParams

if TYPE_CHECKING:
    from rollout.structured.grammar_state import GrammarState


@dataclass(slots=True)
class SampleRow:
    params: SamplingParams
    sample_index: int  # which of the request's n samples: with params.seed, the noise key
    seen_token_ids: list[int]  # prompt + output so far: the repetition penalty; its length is the position
    num_prompt_tokens: int = 0  # seen_token_ids[num_prompt_tokens:] is the output (penalties, bans)
    grammar: GrammarState | None = None  # structured outputs: masks what the grammar forbids next


@dataclass(slots=True)
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[float | None]
    top_logprobs: list[dict[int, float] | None]
    kept_log_masses: list[float | None] | None = None  # per row with logprobs: truncation_mass.py
    kept_token_ids: list[list[int] | None] | None = None  # per row with return_kept_tokens
    # Rows whose masks (grammar, bans) left no token: nothing was drawn, their entries above mean nothing
    empty_rows: list[int] = field(default_factory=list)


class Sampler:
    def __init__(self, seed: int, eos_token_ids: frozenset[int] = frozenset()) -> None:
        self.eos_token_ids = eos_token_ids  # what min_tokens bans besides stop_token_ids
        self._rng = random.Random(seed)  # keys of unseeded rows: reproducible per engine seed
        self._workspace = Workspace()  # the noise's [rows, vocab] buffers, reused every step

    def __call__(self, logits: torch.Tensor, rows: list[SampleRow]) -> SamplerOutput:
        """logits: [R, vocab] fp32, one row per sample to draw."""
        model_logits = logits
        raw_logprobs = (
            torch.log_softmax(logits, dim=-1) if _any(rows, lambda p: p.logprobs_mode == "raw") else None
        )
        processors = processor_batch(rows, logits.shape[1], self.eos_token_ids, logits.device)
        grammars = any(row.grammar is not None for row in rows)
        if processors is not None or grammars:  # usually neither: nothing copied
            logits = self._own_copy(logits)
        if processors is not None:
            processors.apply(logits)
        if grammars:
            apply_grammar_masks(logits, rows)  # with the bans: part of the processed distribution
        logits, empty = guard_empty_rows(logits, rows, model_logits)  # no token left: drawn from nothing
        scaled = logits = _apply_temperature(logits, rows)
        logits = _apply_top_k(logits, rows)
        logits = _apply_top_p(logits, rows)
        logits = _apply_min_p(logits, rows)
        processed = torch.log_softmax(logits, dim=-1)
        token_ids = self._draw(processed, rows)
        out = _gather_logprobs(processed, raw_logprobs, token_ids, rows)
        out.kept_log_masses = kept_log_masses(scaled, logits, out.logprobs)
        out.kept_token_ids = kept_token_ids(logits, [row.params.return_kept_tokens for row in rows])
        out.empty_rows = empty_row_indices(empty)
        return out

    def _own_copy(self, logits: torch.Tensor) -> torch.Tensor:
        """The caller's logits in the sampler's buffer, to process in place: the same memory every step
        (a fresh [R, vocab] tensor costs more in page faults on a CPU than the copy itself)."""
        buffer = self._workspace.get("logits", tuple(logits.shape), logits.dtype, logits.device)
        return buffer.copy_(logits)

    def _draw(self, logprobs: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
        """The exponential race argmax p / E, in log space: argmax(log p - log E)."""
        greedy = [row.params.greedy for row in rows]
        if all(greedy):
            return logprobs.argmax(dim=-1)
        states = [row_state(self._key(row), len(row.seen_token_ids)) for row in rows]
        sampled = exponential_race(logprobs, states, self._workspace)
        if not any(greedy):
            return sampled
        is_greedy = to_device(greedy, torch.bool, logprobs.device)
        return torch.where(is_greedy, logprobs.argmax(dim=-1), sampled)

    def _key(self, row: SampleRow) -> int:
        seed = row.params.seed
        return sample_key(seed, row.sample_index) if seed is not None else self._rng.getrandbits(64)


def _any(rows: list[SampleRow], predicate) -> bool:
    return any(predicate(row.params) for row in rows)


def _column(rows: list[SampleRow], values: list[float], like: torch.Tensor) -> torch.Tensor:
    return to_device(values, like.dtype, like.device)[:, None]


def _apply_temperature(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    """Greedy rows keep their logits; a temperature below 1 can overflow fp32 logits, hence the clamp."""
    temps = [row.params.temperature if not row.params.greedy else 1.0 for row in rows]
    if all(t == 1.0 for t in temps):
        return logits
    scaled = logits / _column(rows, [min(t, _FP32_MAX) for t in temps], logits)
    return _finite(scaled) if min(temps) < 1.0 else scaled


_FP32_MAX = torch.finfo(torch.float32).max


def _finite(values: torch.Tensor) -> torch.Tensor:
    """Overflowed values become the largest finite fp32 ones: still the extremes, never inf - inf = NaN."""
    return values.clamp(min=-_FP32_MAX, max=_FP32_MAX)


def _apply_top_k(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    vocab = logits.shape[1]
    active = [0 < row.params.top_k < vocab and not row.params.greedy for row in rows]
    if not any(active):
        return logits
    # k-th largest value per row, without a full sort of the vocabulary; rows without top-k take
    # k = 1 (cheap) and a threshold of -inf
    ks = [row.params.top_k if on else 1 for row, on in zip(rows, active, strict=True)]
    kth = logits.topk(max(ks), dim=-1).values.gather(
        1, to_device(ks, torch.int64, logits.device)[:, None] - 1
    )
    kth = kth.masked_fill(~to_device(active, torch.bool, logits.device)[:, None], float("-inf"))
    return logits.masked_fill(logits < kth, float("-inf"))


def _apply_top_p(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    # a row without top-p gets an infinite threshold: its rounded cumulative mass can reach 1.0
    # before the tail, and comparing it with p = 1.0 would cut tokens only when batched
    ps = [row.params.top_p if row.params.top_p < 1.0 and not row.params.greedy else inf for row in rows]
    if all(p == inf for p in ps):
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    # drop a token when the mass before it already reaches p (the top token always stays)
    mass_before = probs.cumsum(dim=-1) - probs
    drop_sorted = mass_before >= _column(rows, ps, probs)
    drop_sorted[:, 0] = False  # a top_p that rounds to 0 in fp32 still keeps the top token
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def _apply_min_p(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    ms = [row.params.min_p if not row.params.greedy else 0.0 for row in rows]
    if all(m == 0.0 for m in ms):
        return logits
    probs = logits.softmax(dim=-1)
    threshold = probs.amax(dim=-1, keepdim=True) * _column(rows, ms, probs)
    return logits.masked_fill(probs < threshold, float("-inf"))


def _gather_logprobs(
    processed: torch.Tensor, raw: torch.Tensor | None, token_ids: torch.Tensor, rows: list[SampleRow]
) -> SamplerOutput:
    """Batched gathers first, then a fixed number of device-to-host copies, whatever the batch size."""
    wanted = [i for i, row in enumerate(rows) if row.params.logprobs is not None]
    logprobs: list[float | None] = [None] * len(rows)
    tops: list[dict[int, float] | None] = [None] * len(rows)
    if not wanted:
        return SamplerOutput(token_ids.tolist(), logprobs, tops)
    source = _logprob_source(processed, raw, rows)  # [R, vocab]
    chosen = source.gather(1, token_ids[:, None])[:, 0]
    max_k = max(rows[i].params.logprobs for i in wanted)
    top = source.topk(max_k) if max_k else None
    ids, values = token_ids.tolist(), chosen.tolist()
    top_ids, top_values = (top.indices.tolist(), top.values.tolist()) if top is not None else ([], [])
    for i in wanted:
        logprobs[i] = values[i]
        k = rows[i].params.logprobs
        if k:  # as vLLM: the top k, plus the sampled token when it is not among them (k + 1 entries)
            tops[i] = dict(zip(top_ids[i][:k], top_values[i][:k], strict=True))
            tops[i].setdefault(ids[i], values[i])
    return SamplerOutput(ids, logprobs, tops)


def _logprob_source(processed: torch.Tensor, raw: torch.Tensor | None, rows: list[SampleRow]) -> torch.Tensor:
    """Each row's logprobs in its own mode: `raw` rows from the unscaled log-softmax, the rest processed."""
    if raw is None:
        return processed
    is_raw = to_device([row.params.logprobs_mode == "raw" for row in rows], torch.bool, processed.device)
    return torch.where(is_raw[:, None], raw, processed)
