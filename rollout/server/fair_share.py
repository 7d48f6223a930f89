"""FairShare: which queued requests enter the engine next, so one caller's big batch cannot stall others.

The engine serves its waiting requests first come, first served, so a request queued behind a
4,096-sample batch would wait for nearly all of it. The engine loop therefore keeps requests in
this queue and hands the engine only as many samples as it can run at once (`max_num_seqs`); when
a slot frees, the next request comes from the callers in turn (round robin over callers, first in
first out within a caller). A small request from a new caller thus waits for at most one slot to
free, not for the batch ahead of it, while the engine still always has a full batch to run.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class Queued(Protocol):
    @property
    def caller(self) -> str: ...

    @property
    def num_samples(self) -> int: ...


Q = TypeVar("Q", bound=Queued)


class FairShare(Generic[Q]):
    """Per-caller FIFO queues served round robin; `take(room)` admits up to `room` samples."""

    def __init__(self) -> None:
        self._callers: OrderedDict[str, deque[Q]] = OrderedDict()  # order = whose turn is next

    def append(self, item: Q) -> None:
        self._callers.setdefault(item.caller, deque()).append(item)

    def remove(self, item: Q) -> None:
        queue = self._callers[item.caller]
        queue.remove(item)
        if not queue:
            del self._callers[item.caller]

    def take(self, room: int) -> list[Q]:
        """Requests in turn while their samples fit in `room`; stops at the first that does not fit
        (skipping it for smaller ones would starve large requests)."""
        taken: list[Q] = []
        while self._callers:
            caller, queue = next(iter(self._callers.items()))
            if queue[0].num_samples > room:
                break
            item = queue.popleft()
            room -= item.num_samples
            taken.append(item)
            del self._callers[caller]
            if queue:
                self._callers[caller] = queue  # back of the line: the next caller goes first
        return taken

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._callers.values())

    def __bool__(self) -> bool:
        return bool(self._callers)

    def __iter__(self) -> Iterator[Q]:
        for queue in list(self._callers.values()):
            yield from list(queue)
