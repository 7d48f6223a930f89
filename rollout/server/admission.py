"""FairLimit: one capacity shared by callers, so one caller cannot starve or fail another.

Both front ends bound what a caller holds with it: open generate calls (each holds a server thread:
gRPC `--max-generate-calls`, HTTP the same number) and unfinished requests (the engine loop's
`max_pending_requests`). The rule, for `amount` more units asked by `caller`:

- the total never passes the capacity (`ServerFullError`);
- a caller holding nothing is admitted whenever the total fits (its first call always gets in);
- otherwise a caller past its share, `(capacity - reserve) // active callers`, is admitted only while the
  total stays out of the reserve (`OverShareError`). The reserve, an eighth of the capacity, is kept for
  callers under their share: a caller alone can hold at most capacity - reserve, so a newcomer always
  finds room at once, and as the big caller's calls end its share shrinks to make room for others.

Both refusals are RESOURCE_EXHAUSTED / HTTP 429 with a retry-after hint (`retry-after` trailing
metadata, the `Retry-After` header); RolloutClient retries them with backoff.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

from rollout.server.loop_errors import QueueFullError

RETRY_AFTER_S = 1  # the hint sent with a refusal: calls end within seconds under normal load
RESERVE_FRACTION = 8  # capacity // 8 is kept for callers under their share


class AdmissionRefusedError(QueueFullError):
    """Refused for now: retry after `retry_after_s` seconds (RESOURCE_EXHAUSTED / 429)."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(f"{message}; retry in {retry_after_s} s")
        self.retry_after_s = retry_after_s


class ServerFullError(AdmissionRefusedError):
    """Every unit of the capacity is held."""


class OverShareError(AdmissionRefusedError):
    """The caller holds more than its share while others may need the rest."""


class FairLimit:
    """`capacity` units of one resource (`what`, e.g. "generate calls"), held per caller; thread-safe."""

    def __init__(self, capacity: int, what: str, flag: str) -> None:
        if capacity < 1:
            raise ValueError(f"{flag} must be at least 1, got {capacity}")
        self.capacity = capacity
        self.what, self.flag = what, flag
        self._held: Counter[str] = Counter()
        self._total = 0
        self._lock = threading.Lock()

    def acquire(self, caller: str, amount: int = 1) -> None:
        """Takes `amount` units for `caller`, or raises ServerFullError / OverShareError (nothing taken)."""
        with self._lock:
            if self._total + amount > self.capacity:
                raise ServerFullError(full_message(self._total, self.what, self.capacity, self.flag))
            refusal = share_refusal(self.capacity, self._held, caller, amount, self.what, self.flag)
            if refusal is not None:
                raise OverShareError(refusal)
            self._held[caller] += amount
            self._total += amount

    def release(self, caller: str, amount: int = 1) -> None:
        with self._lock:
            self._held[caller] -= amount
            self._total -= amount
            if self._held[caller] <= 0:
                del self._held[caller]

    def held(self, caller: str) -> int:
        with self._lock:
            return self._held.get(caller, 0)

    @property
    def total(self) -> int:
        return self._total


def share_refusal(
    capacity: int, held: Mapping[str, int], caller: str, amount: int, what: str, flag: str
) -> str | None:
    """Why `caller` may not take `amount` more units now, or None (the capacity is checked apart).

    `held`: every caller's units. A caller's first units are always allowed, and so are any that keep
    the total out of the reserve; past that, a caller may hold up to its share."""
    mine = held.get(caller, 0)
    total = sum(held.values())
    reserve = capacity // RESERVE_FRACTION
    if mine == 0 or total + amount <= capacity - reserve:
        return None
    active = sum(1 for units in held.values() if units > 0)
    share = max(1, (capacity - reserve) // active)
    if mine + amount <= share:
        return None
    return (
        f"this caller holds {mine} of {total} {what}: its share while the server is busy is {share} "
        f"({flag} {capacity}, less {reserve} kept for other callers, among {active} caller(s))"
    )


def full_message(total: int, what: str, capacity: int, flag: str) -> str:
    return f"{total} {what}: the server's limit ({flag} {capacity})"


def too_many_prompts(count: int, limit: int, field: str = "prompts") -> str:
    """A call that could never be admitted (INVALID_ARGUMENT / 400), checked before any prompt is tokenized."""
    return (
        f"{field}: the call has {count} new prompts, more than the server admits at once "
        f"(max_pending_requests {limit}); split it into smaller calls"
    )
