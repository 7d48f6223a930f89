"""Sleep mode across the fleet: every replica sleeps, or none does; the fleet sleeps when all do.

Each replica sleeps through its own Sleep RPC (the single server's semantics: requests wait, or are
refused, until WakeUp). A replica that refuses (or dies) makes the others that slept wake again and
the call fails naming it; after level 2 their weights are gone all the same (they wait for a weight
update, as a woken level-2 server does: the error says so). The ledger records the fleet's state
first, so a replica started meanwhile starts asleep (replica_sleep.py); replicas that came up during
the call get it too. Synchronous (Ray Serve handle calls): the gRPC front's threads, the driver, the
OpenAI ingress through a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from rollout.engine.sleep.engine_memory import TAGS, check_level, check_tags
from rollout.fleet.replica_fanout import Metadata, call_each, describe_failures
from rollout.protocol.generated import rollout_pb2 as pb


class FleetSleepError(RuntimeError):
    """A replica refused or failed; `code` is its gRPC status name (the first one's)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def sleep_fleet(
    handle: Any,
    list_replicas: Callable[[], list[str]],
    ledger: Any,
    level: int = 1,
    abort_running: bool = False,
    metadata: Metadata = (),
) -> int:
    """Sleeps every replica at `level`; returns the bytes they freed in all."""
    check_level(level)  # ValueError naming it, before any replica sleeps
    request = pb.SleepRequest(level=level, abort_running=abort_running)
    previous = ray.get(ledger.sleep_state.remote())
    ray.get(ledger.set_sleeping.remote((level, TAGS)))
    replicas = list_replicas()
    replies, failed = call_each(handle, replicas, "Sleep", request, metadata)
    if failed:
        ray.get(ledger.set_sleeping.remote(previous))
        call_each(handle, list(replies), "WakeUp", pb.WakeUpRequest(), metadata)
        lost = " (their weights were discarded at level 2: they wait for a weight update)" * (level == 2)
        woken = f"; woke {sorted(replies)} again{lost}" if replies else ""
        raise FleetSleepError(
            f"fleet sleep failed: {describe_failures(failed)}{woken}", next(iter(failed.values()))[0]
        )
    late, _ = call_each(handle, [r for r in list_replicas() if r not in replicas], "Sleep", request, metadata)
    freed = [pb.SleepResponse.FromString(reply.body).bytes_freed for reply in {**replies, **late}.values()]
    return sum(freed)


def wake_fleet(
    handle: Any,
    list_replicas: Callable[[], list[str]],
    ledger: Any,
    tags: list[str] | None = None,
    metadata: Metadata = (),
) -> None:
    """Wakes `tags` (default: all) on every replica; FleetSleepError naming those that failed."""
    wanted = check_tags(tags)
    state = ray.get(ledger.sleep_state.remote())
    if state is not None:
        asleep = tuple(tag for tag in state[1] if tag not in wanted)
        ray.get(ledger.set_sleeping.remote((state[0], asleep) if asleep else None))
    request = pb.WakeUpRequest(tags=tags or [])
    _, failed = call_each(handle, list_replicas(), "WakeUp", request, metadata)
    if failed:
        raise FleetSleepError(
            f"fleet wake_up failed: {describe_failures(failed)}", next(iter(failed.values()))[0]
        )


def sleep_states(
    handle: Any, replicas: list[str], metadata: Metadata = ()
) -> dict[str, pb.IsSleepingResponse]:
    """Each replica's IsSleeping answer; FleetSleepError naming one that does not answer."""
    replies, failed = call_each(handle, replicas, "IsSleeping", pb.IsSleepingRequest(), metadata)
    if failed:
        raise FleetSleepError(
            f"fleet is_sleeping failed: {describe_failures(failed)}", next(iter(failed.values()))[0]
        )
    return {r: pb.IsSleepingResponse.FromString(reply.body) for r, reply in replies.items()}


def fleet_state(states: dict[str, pb.IsSleepingResponse]) -> pb.IsSleepingResponse:
    """Asleep only when every replica sleeps (at the lowest level among them, the tags all have asleep)."""
    rows = list(states.values())
    asleep = bool(rows) and all(s.is_sleeping for s in rows)
    tags = [t for t in TAGS if rows and all(t in s.sleeping_tags for s in rows)]
    return pb.IsSleepingResponse(
        is_sleeping=asleep,
        level=min(s.level for s in rows) if asleep else 0,
        sleeping_tags=tags if asleep else [],
        awaiting_weights=any(s.awaiting_weights for s in rows),
    )
