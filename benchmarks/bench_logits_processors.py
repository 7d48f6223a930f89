"""Sampler cost per step at 256 rows, with and without vLLM's logits processors (not a test).

    python benchmarks/bench_logits_processors.py [--vocab 151936] [--rows 256] [--output-len 100]
        [--sampling plain|top-k-min-p|top-p|raw]

Rows without processors take the fast path (two attribute checks per row, and three for the
empty-row check: rollout/engine/sample/empty_rows.py); rows with them are processed as one batch
(rollout/engine/sample/processor_batch.py) in a copy of the logits, and rows with bans are checked for
an empty distribution. Also counts the torch ops of a step (on a GPU, about one launch each).
--sampling sets every row's other settings: temperature 1 (plain); at temperature 0.8, top-k with
min-p (their masks), top-p (a sort of the vocabulary), or raw logprobs (a second log-softmax).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rollout.engine.sample.empty_rows import guard_empty_rows
from rollout.engine.sample.sampler import Sampler, SampleRow
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


def rows_of(num_rows: int, with_processors: int, output_len: int, sampling: str = "plain") -> list[SampleRow]:
    base = SamplingParams(seed=0, logprobs=0, **SAMPLING[sampling])
    special = SamplingParams(seed=0, logprobs=0, **SAMPLING[sampling], **PROCESSORS)
    seen = list(range(100, 100 + 64 + output_len))
    return [SampleRow(special if i < with_processors else base, i, seen, 64) for i in range(num_rows)]


def time_step(sampler: Sampler, logits: torch.Tensor, rows: list[SampleRow], repeats: int) -> float:
    """The best of `repeats` steps, in ms (the least disturbed by other processes)."""
    sampler(logits, rows)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        sampler(logits, rows)
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
    parser.add_argument("--sampling", choices=SAMPLING, default="plain", help="every row's other settings")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    logits = torch.randn(args.rows, args.vocab, device=args.device)
    sampler = Sampler(seed=0, eos_token_ids=frozenset({2}))
    for label, count in (("none", 0), ("1 row", 1), ("all rows", args.rows)):
        rows = rows_of(args.rows, count, args.output_len, args.sampling)
        ms = time_step(sampler, logits, rows, args.repeats)
        ops = ops_per_step(sampler, logits, rows)
        print(
            f"{args.device} vocab {args.vocab} rows {args.rows} output {args.output_len} {args.sampling}, "
            f"processors on {label}: {ms:.2f} ms/step, {ops} torch ops/step"
        )
    check, empty_check = fast_path_check_us(rows_of(args.rows, 0, 100))
    print(f"fast-path check for {args.rows} rows without processors: {check:.0f} us/step")
    print(f"empty-row check for {args.rows} rows without processors: {empty_check:.0f} us/step")


if __name__ == "__main__":
    main()
