"""Overlapped training: the server generates round t+1 while the trainer learns from round t.

The lag is bounded to one round: round t+1 is submitted before the trainer's step on round t, and
the weights that step produces are pushed with `in_flight="keep"`, so they land while round t+1 is
still generating (its samples then span two versions, and their `weight_versions` say so). The
loss's importance ratio uses the server's per-token behaviour logprobs, which is exact for such
samples. `synchronous` is the same loop without the overlap, for comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Batch = TypeVar("Batch")
Stats = TypeVar("Stats")
Pushed = TypeVar("Pushed")  # what a push reports (its wall time, its version...), handed to `learn`


def synchronous(
    rounds: int,
    push: Callable[[str], float],
    generate: Callable[[int], Batch],
    learn: Callable[[int, Batch, float], Stats],
) -> list[Stats]:
    """push (wait) -> generate -> learn, one round after the other."""
    history = []
    for round_ in range(rounds):
        pushed = push("wait")
        history.append(learn(round_, generate(round_), pushed))
    return history


def overlapped(
    rounds: int,
    push: Callable[[str], float],
    generate: Callable[[int], Batch],
    learn: Callable[[int, Batch, float], Stats],
) -> list[Stats]:
    """Round t+1 generates on a background thread while round t is learned from (lag <= 1)."""
    history = []
    pushed = push("wait")
    with ThreadPoolExecutor(1, thread_name_prefix="rollout-demo-generate") as pool:
        pending = pool.submit(generate, 0)
        for round_ in range(rounds):
            batch = pending.result()
            if round_ + 1 < rounds:
                pending = pool.submit(generate, round_ + 1)
            history.append(learn(round_, batch, pushed))
            if round_ + 1 < rounds:
                pushed = push("keep")  # lands mid-flight of round t+1
    return history
