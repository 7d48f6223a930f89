"""A graceful stop within one deadline: the grace covers the drain and closing both front ends.

`rollout serve --grace 10` under load exited after 25 s: the drain took the whole grace, then
aborting, closing gRPC and the HTTP port and Python's own exit came on top. Now the running requests
get the grace less a closing share (a quarter, at most 2 s); then what still runs is aborted (its
samples come back "abort", resumable), the calls get their last messages and both ports close, and
`rollout serve` leaves without Python's finalization (a final collection over the start-up heap,
1.6 s on a 2-core CPU). Requests that arrive meanwhile are answered UNAVAILABLE / 503 at once.
"""

from __future__ import annotations

import time

CLOSING_SHARE = 0.25  # of the grace, kept for aborting and closing
CLOSING_MAX_S = 2.0
CLOSING_UNBOUNDED_S = 2.0  # with no grace (wait for every request), after the last one ended
MIN_ABORT_WAIT_S = 0.5  # even with no grace, the aborted requests' samples reach their calls


def closing_seconds(grace: float | None) -> float:
    """The part of `grace` kept for aborting what still runs and closing the ports."""
    if grace is None:
        return CLOSING_UNBOUNDED_S
    return min(max(grace, 0.0) * CLOSING_SHARE, CLOSING_MAX_S)


class Deadline:
    """`seconds` from now (None: no deadline)."""

    def __init__(self, seconds: float | None) -> None:
        self.at = None if seconds is None else time.monotonic() + seconds

    def left(self, floor: float = 0.0) -> float | None:
        """Seconds left (at least `floor`), None without a deadline."""
        return None if self.at is None else max(self.at - time.monotonic(), floor)
