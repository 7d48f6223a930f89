"""Sampler: logits -> tokens and the logprobs of the distribution each token was drawn from.

Order of processing (vLLM's and TRL's expectation): logit bias, repetition, frequency and presence
penalties, the bans (allowed_token_ids, bad_words, min_tokens: logits_processors.py), the structured
outputs' grammar mask (grammar_mask.py), temperature, top-k, top-p, min-p; a row the bans and the
grammar leave without a token is flagged, never drawn from (empty_rows.py). Each row's logprobs are in its
vLLM mode (sampling_params/logprobs_modes.py): "processed_logprobs" the fp32 log-softmax after all of it,
"processed_logits" the values before that log-softmax; "raw_logprobs" the log-softmax of the model's logits
with only the grammar mask (vLLM's: its model runner masks the logits before the sampler), "raw_logits"
those logits themselves. The steps up to the
truncation are shared with the trainer-side replay (rollout/replay/), which recomputes the processed
distribution from a trainer's logits. Sampling uses the exponential race (argmax p / E with
E ~ Exp(1)), which draws exactly from p and needs no host sync; a seeded row's noise is a function of
(seed, sample index, position) drawn for all rows in one set of ops (sampling_noise.py), so its
tokens do not depend on what else is in the batch or on how the batch was scheduled.

Host work stays flat in the batch size: one call samples the whole step, the processors run a fixed
number of ops in the sampler's own copy of the logits (processor_batch.py), the vocabulary is sorted
only for top-p (top-k uses a partial `topk`; greedy, temperature and min-p sort nothing), an
all-greedy batch draws no noise, and results reach the host in a fixed number of copies. Memory stays
flat too: every [R, vocab] temporary is written into the sampler's workspace (on a CPU a fresh one costs
more in page faults than its arithmetic), and only host lists leave a step, so the next step may
overwrite it all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from rollout.engine.sample.empty_rows import empty_row_indices, guard_empty_rows
from rollout.engine.sample.exponential_race import exponential_race
from rollout.engine.sample.sampling_noise import row_state, sample_key
from rollout.engine.sample.step_processors import StepProcessors, step_processors
from rollout.engine.sample.temperature import temperature_scaled
from rollout.engine.sample.truncation import truncate
from rollout.engine.sample.truncation_mass import kept_log_masses, kept_token_ids
from rollout.logprobs import Logprob
from rollout.ops.host_to_device import to_device
from rollout.ops.workspace import Workspace
from rollout.sampling_params import SamplingParams
from rollout.sampling_params.logprobs_modes import DEFAULT_LOGPROBS_MODE, is_raw

if TYPE_CHECKING:
    from rollout.engine.requests.request import Sequence
    from rollout.engine.sample.token_counts import TokenCounts
    from rollout.structured_outputs.grammar_state import GrammarState


@dataclass(slots=True)
class SampleRow:
    params: SamplingParams
    sample_index: int  # which of the request's n samples: with params.seed, the noise key
    seen_token_ids: list[int]  # prompt + output so far: the repetition penalty; its length is the position
    num_prompt_tokens: int = 0  # seen_token_ids[num_prompt_tokens:] is the output (penalties, bans)
    grammar: GrammarState | None = None  # structured outputs: masks what the grammar forbids next
    # the sequence's counts of seen_token_ids for the penalties, kept across steps; None: counted afresh
    token_counts: TokenCounts | None = None

    @classmethod
    def of(cls, seq: Sequence) -> SampleRow:
        """The row an engine sequence samples its next token from."""
        return cls(
            seq.request.params,
            seq.sample_index,
            seq.token_ids,
            seq.num_prompt_tokens,
            seq.grammar,
            seq.token_counts,
        )


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
        # every [rows, vocab] temporary (the copy, scaled, truncated, log-softmax, noise), reused each step
        self._workspace = Workspace()

    def __call__(self, logits: torch.Tensor, rows: list[SampleRow]) -> SamplerOutput:
        """logits: [R, vocab] fp32, one row per sample to draw."""
        model_logits = logits  # the caller's: read, never written
        step = step_processors(rows, logits.shape[1], self.eos_token_ids, logits.device)
        raw = self._raw_values(logits, rows, step)
        if step is not None:  # usually none: nothing copied
            logits = self._own_copy(logits)
            step.apply(logits)  # the bans and the grammar: part of the processed distribution
        logits, empty = guard_empty_rows(logits, rows, model_logits)  # no token left: drawn from nothing
        scaled = self._apply_temperature(logits, rows, owned=logits is not model_logits)
        logits = truncate(scaled, rows, self._workspace)
        processed = self._log_softmax(logits, "processed")
        token_ids = self._draw(processed, rows)
        out = _gather_logprobs(
            self._logprob_source(processed, logits, raw, rows), token_ids, rows, self._workspace
        )
        out.kept_log_masses = kept_log_masses(scaled, logits, out.logprobs, self._workspace)
        out.kept_token_ids = kept_token_ids(logits, [row.params.return_kept_tokens for row in rows])
        out.empty_rows = empty_row_indices(empty)
        return out

    def _own_copy(self, logits: torch.Tensor) -> torch.Tensor:
        """The caller's logits in the sampler's buffer, to process in place: the same memory every step
        (a fresh [R, vocab] tensor costs more in page faults on a CPU than the copy itself)."""
        return self._buffer("logits", logits).copy_(logits)

    def _buffer(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """[R, vocab] of the workspace, overwritten by the next step: nothing returned may point into it."""
        return self._workspace.get(name, tuple(like.shape), like.dtype, like.device)

    def _log_softmax(self, logits: torch.Tensor, name: str) -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1, out=self._buffer(name, logits))

    def _raw_values(
        self, logits: torch.Tensor, rows: list[SampleRow], step: StepProcessors | None
    ) -> torch.Tensor | None:
        """The raw rows' values: the model's logits, with the grammar masks when a row has a grammar (vLLM),
        or their log-softmax for "raw_logprobs" rows; None when no row returns raw values."""
        modes = _modes(rows)
        if not any(mode is not None and is_raw(mode) for mode in modes):
            return None
        if step is not None and step.grammar is not None:
            logits = self._buffer("raw masked", logits).copy_(logits)
            step.grammar.apply(logits)
        if "raw_logprobs" not in modes:
            return logits
        raw = self._log_softmax(logits, "raw")
        if "raw_logits" in modes:
            torch.where(_rows_in(modes, "raw_logits", raw), logits, raw, out=raw)
        return raw

    def _logprob_source(
        self,
        processed: torch.Tensor,
        processed_logits: torch.Tensor,
        raw: torch.Tensor | None,
        rows: list[SampleRow],
    ) -> torch.Tensor:
        """[R, vocab]: each row's values in its own mode; `processed` itself when every row wants those."""
        modes = _modes(rows)
        if all(mode in (None, "processed_logprobs") for mode in modes):
            return processed
        source = self._buffer("source", processed).copy_(processed)
        if "processed_logits" in modes:
            torch.where(_rows_in(modes, "processed_logits", source), processed_logits, source, out=source)
        if raw is not None:
            torch.where(_rows_in(modes, ("raw_logprobs", "raw_logits"), source), raw, source, out=source)
        return source

    def _apply_temperature(self, logits: torch.Tensor, rows: list[SampleRow], owned: bool) -> torch.Tensor:
        """In place when the logits are the sampler's own, else into its "logits" buffer."""
        return temperature_scaled(logits, rows, out=logits if owned else self._buffer("logits", logits))

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


def _modes(rows: list[SampleRow]) -> list[str | None]:
    """Each row's logprobs mode, None for rows that return no logprobs (a bare SamplingParams: the default)."""
    return [
        None if row.params.logprobs is None else (row.params.logprobs_mode or DEFAULT_LOGPROBS_MODE)
        for row in rows
    ]


def _rows_in(modes: list[str | None], wanted: str | tuple[str, ...], like: torch.Tensor) -> torch.Tensor:
    """[R, 1] bool: the rows whose mode is (one of) `wanted`."""
    wanted = (wanted,) if isinstance(wanted, str) else wanted
    return to_device([mode in wanted for mode in modes], torch.bool, like.device)[:, None]


def _gather_logprobs(
    source: torch.Tensor, token_ids: torch.Tensor, rows: list[SampleRow], workspace: Workspace
) -> SamplerOutput:
    """Batched gathers first, then a fixed number of device-to-host copies, whatever the batch size.

    Values are Logprobs with vLLM's ranks (rollout/logprobs.py): the top k ranked 1..k in order, the sampled
    token its top-k rank when among them, else the number of tokens whose value is >= its own."""
    wanted = [i for i, row in enumerate(rows) if row.params.logprobs is not None]
    logprobs: list[float | None] = [None] * len(rows)
    tops: list[dict[int, float] | None] = [None] * len(rows)
    if not wanted:
        return SamplerOutput(token_ids.tolist(), logprobs, tops)
    chosen = source.gather(1, token_ids[:, None])
    # counted as fp32 0/1 (exact below 2^24 tokens): a bool sum runs ~3x slower on a CPU
    at_least = workspace.get("rank", tuple(source.shape), source.dtype, source.device)
    ranks = [int(r) for r in torch.ge(source, chosen, out=at_least).sum(dim=-1).tolist()]
    max_k = max(rows[i].params.logprobs for i in wanted)
    top = source.topk(max_k) if max_k else None
    ids, values = token_ids.tolist(), chosen[:, 0].tolist()
    top_ids, top_values = (top.indices.tolist(), top.values.tolist()) if top is not None else ([], [])
    for i in wanted:
        k = rows[i].params.logprobs
        best = top_ids[i][:k] if k else []
        rank = best.index(ids[i]) + 1 if ids[i] in best else ranks[i]
        logprobs[i] = Logprob(values[i], rank)
        if k:  # as vLLM: the top k, plus the sampled token when it is not among them (k + 1 entries)
            tops[i] = {
                t: Logprob(v, j + 1) for j, (t, v) in enumerate(zip(best, top_values[i][:k], strict=True))
            }
            tops[i].setdefault(ids[i], logprobs[i])
    return SamplerOutput(ids, logprobs, tops)
