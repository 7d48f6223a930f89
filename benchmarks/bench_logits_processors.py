"""Sampler cost per step at 256 rows, with and without vLLM's logits processors (not a test).

    python benchmarks/bench_logits_processors.py [--vocab 151936] [--rows 256] [--output-len 100]
        [--prompt-len 64] [--repetition-penalty 1.0] [--sampling plain|top-k-min-p|top-p|raw]

Rows without processors take the fast path (two attribute checks per row, and three for the
empty-row check: rollout/engine/sample/empty_rows.py); rows with them are processed as one batch
(rollout/engine/sample/processor_batch.py) in a copy of the logits, and rows with bans are checked for
an empty distribution. Also counts the torch ops of a step (on a GPU, about one launch each).
--sampling sets every row's other settings: temperature 1 (plain); at temperature 0.8, top-k with
min-p (their masks), top-p (a sort of the vocabulary), or raw logprobs (a second log-softmax).
--repetition-penalty adds that penalty to the processed rows. As in the engine, each row has its own
token list (distinct ids: the most the penalties can count), which grows by one token after each step,
and rows with penalties keep their token counts (token_counts.py) from step to step;
the step's processor batch is also timed alone (host work: building it from the rows' tokens).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rollout.engine.sample.empty_rows import guard_empty_rows
from rollout.engine.sample.processor_batch import processor_batch
from rollout.engine.sample.sampler import Sampler, SampleRow
from rollout.engine.sample.token_counts import TokenCounts, needs_token_counts
from rollout.sampling_params import SamplingParams

PROCESSORS = dict(
    min_tokens=4,
    presence_penalty=0.5,
    frequency_penalty=0.5,
    logit_bias={11: 2.0, 12: -2.0},
    bad_words_token_ids=[[5], [6, 7]],
)


SAMPLING = {
    "plain": dict(temperature=1.0),
    "top-k-min-p": dict(temperature=0.8, top_k=50, min_p=0.05),
    "top-p": dict(temperature=0.8, top_p=0.95),
    "raw": dict(temperature=0.8, logprobs_mode="raw"),
}


def rows_of(
    num_rows: int,
    with_processors: int,
    output_len: int,
    sampling: str = "plain",
    prompt_len: int = 64,
    repetition_penalty: float = 1.0,
) -> list[SampleRow]:
    base = SamplingParams(seed=0, logprobs=0, **SAMPLING[sampling])
    special = SamplingParams(
        seed=0, logprobs=0, **SAMPLING[sampling], **PROCESSORS, repetition_penalty=repetition_penalty
    )
    rows = []
    for i in range(num_rows):
        params = special if i < with_processors else base
        counts = TokenCounts() if needs_token_counts(params) else None  # kept across steps, as a sequence's
        rows.append(
            SampleRow(params, i, list(range(100, 100 + prompt_len + output_len)), prompt_len, None, counts)
        )
    return rows


def grow(rows: list[SampleRow]) -> None:
    """Each row's next token, as the engine appends it after a step (a new id)."""
    for row in rows:
        row.seen_token_ids.append(100 + len(row.seen_token_ids))


def time_step(step: Callable[[list[SampleRow]], object], rows: list[SampleRow], repeats: int) -> float:
    """The best of `repeats` steps, in ms (the least disturbed by other processes); rows grow between."""
    step(rows)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        grow(rows)
        start = time.perf_counter()
        step(rows)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


class _OpCount(TorchDispatchMode):
    """Ops that compute (views only relabel memory)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


def ops_per_step(sampler: Sampler, logits: torch.Tensor, rows: list[SampleRow]) -> int:
    with _OpCount() as counter:
        sampler(logits, rows)
    return counter.count


def fast_path_check_us(rows: list[SampleRow], repeats: int = 200) -> tuple[float, float]:
    """What rows without processors pay per step, in microseconds: the processors' check, the empty-row check."""
    logits = torch.zeros(len(rows), 1)
    times = []
    for check in (
        lambda: [row for row in rows if row.params.processes_logits or row.params.repetition_penalty != 1.0],
        lambda: guard_empty_rows(logits, rows, logits),
    ):
        start = time.perf_counter()
        for _ in range(repeats):
            check()
        times.append((time.perf_counter() - start) / repeats * 1e6)
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--output-len", type=int, default=100, help="output tokens per row so far")
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt tokens per row")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="on the processed rows")
    parser.add_argument("--sampling", choices=SAMPLING, default="plain", help="every row's other settings")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    logits = torch.randn(args.rows, args.vocab, device=args.device)
    eos = frozenset({2})
    sampler = Sampler(seed=0, eos_token_ids=eos)
    for label, count in (("none", 0), ("1 row", 1), ("all rows", args.rows)):
        rows = rows_of(
            args.rows, count, args.output_len, args.sampling, args.prompt_len, args.repetition_penalty
        )
        ms = time_step(lambda r: sampler(logits, r), rows, args.repeats)
        build_ms = time_step(lambda r: processor_batch(r, args.vocab, eos, logits.device), rows, args.repeats)
        ops = ops_per_step(sampler, logits, rows)
        print(
            f"{args.device} vocab {args.vocab} rows {args.rows} prompt {args.prompt_len} output "
            f"{args.output_len} {args.sampling} repetition {args.repetition_penalty}, processors on "
            f"{label}: {ms:.2f} ms/step (building the batch {build_ms:.2f}), {ops} torch ops/step"
        )
    check, empty_check = fast_path_check_us(rows_of(args.rows, 0, 100))
    print(f"fast-path check for {args.rows} rows without processors: {check:.0f} us/step")
    print(f"empty-row check for {args.rows} rows without processors: {empty_check:.0f} us/step")


if __name__ == "__main__":
    main()
