"""Episode: an agent run's turns, each checked for prefix stability, and the training samples they make.

Invariant a trainer needs: a turn's prompt starts with the exact tokens (prompt + completion) of the turn
it continues, so every model token is scored where the model sampled it. Each new turn is checked against
the episode's earlier turns, latest first: the one whose tokens its prompt starts with is its `parent`
(`prefix_stable` True); a turn that continues none while earlier turns exist is a break (`prefix_stable`
False: the framework re-rendered or edited the history; token-in or `previous_response_id` keep it). The
turns form a tree (n > 1 choices branch it, a break starts a new root); each leaf's path is one sample:
the root's prompt, then the model's tokens (mask 1, their logprobs) and the environment's tokens between
turns (tool results, the template's turn markers: mask 0), TRL's `env_mask` convention.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rollout.trajectories.turn import Turn


@dataclass(frozen=True)
class TrajectorySample:
    """One path through an episode, as a trainer takes it."""

    prompt_ids: list[int]
    completion_ids: list[int]  # model and environment tokens after the prompt, in order
    env_mask: list[int]  # 1 where the model sampled the token, 0 where the environment added it
    logprobs: list[float] | None  # per completion token (0.0 on environment tokens); None if a turn has none
    weight_versions: list[tuple[int, int]]  # (completion index, version) spans over the model's tokens
    turns: list[int]  # the episode's turn indices along the path


class Episode:
    def __init__(self, name: str) -> None:
        self.name = name
        self.turns: list[Turn] = []
        self._lock = threading.Lock()

    def add(self, turns: list[Turn]) -> None:
        """Appends one reply's turns (its choices: they share a prompt, so a parent), setting their
        `parent` and `prefix_stable` (module docstring)."""
        with self._lock:
            parent = _parent(self.turns, turns[0].prompt_ids) if turns else None
            for turn in turns:
                turn.parent = parent
                turn.prefix_stable = None if not self.turns else parent is not None
            self.turns.extend(turns)

    @property
    def prefix_stable(self) -> bool:
        """Every turn after the first continues an earlier one."""
        return all(t.prefix_stable is not False for t in self.turns)

    def breaks(self) -> list[int]:
        return [i for i, t in enumerate(self.turns) if t.prefix_stable is False]

    def samples(self) -> list[TrajectorySample]:
        """One sample per leaf of the turn tree, in the order the leaves were recorded."""
        with self._lock:
            turns = list(self.turns)
        continued = {t.parent for t in turns if t.parent is not None}
        return [_sample(turns, _path(turns, i)) for i in range(len(turns)) if i not in continued]


def _parent(turns: list[Turn], prompt: list[int]) -> int | None:
    for i in range(len(turns) - 1, -1, -1):
        tokens = turns[i].tokens
        if len(tokens) <= len(prompt) and prompt[: len(tokens)] == tokens:
            return i
    return None


def _path(turns: list[Turn], leaf: int) -> list[int]:
    path = [leaf]
    while turns[path[-1]].parent is not None:
        path.append(turns[path[-1]].parent)
    return path[::-1]


def _sample(turns: list[Turn], path: list[int]) -> TrajectorySample:
    root = turns[path[0]]
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] | None = []
    spans: list[tuple[int, int]] = []
    for k, index in enumerate(path):
        turn = turns[index]
        if k > 0:  # what the environment added since the turn this one continues
            added = turn.prompt_ids[len(turns[path[k - 1]].tokens) :]
            ids, mask = ids + added, mask + [0] * len(added)
            logprobs = None if logprobs is None else logprobs + [0.0] * len(added)
        spans += [(len(ids) + start, version) for start, version in turn.weight_versions]
        ids, mask = ids + turn.completion_ids, mask + [1] * len(turn.completion_ids)
        if (
            logprobs is not None
            and turn.logprobs is not None
            and len(turn.logprobs) == len(turn.completion_ids)
        ):
            logprobs = logprobs + turn.logprobs
        else:
            logprobs = None
    return TrajectorySample(list(root.prompt_ids), ids, mask, logprobs, spans, path)
