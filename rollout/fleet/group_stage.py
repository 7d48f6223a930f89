"""A group push's fleet half, whoever is rank 0: stage on every member from the broadcast, then commit or drop.

Every member replica answers the handshake through rank 0's store, receives and stages
(group_member.py); this module waits for all of them, and only when every one staged does the
fleet's step 2 run (fleet_update.commit_staged: hold, ledger, commit, release). One refusal or lost
member: every staged copy is dropped and the error names the replica. The ledger records the tensors
the first member put into Ray's store (owned by the ledger actor), as a full push over Ray's store
would: a replacement replica replays exactly the updates the others took, adapters on their base.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any

from rollout.fleet.fleet_update import (
    FleetUpdateError,
    StagedFleet,
    commit_staged,
    describe_failure,
    discard_everywhere,
)
from rollout.fleet.group_member import GroupUpdate, UpdateCalledOff
from rollout.fleet.replica_calls import Targeted
from rollout.fleet.replica_errors import error_text


def stage_members(
    handle: Any, members: list[str], update: GroupUpdate, timeout_s: float
) -> dict[str, Future]:
    """Starts `stage_from_group` on every member (the first keeps a copy for the ledger); returns a
    future per replica (its staged view, or its error)."""
    updates = {r: replace(update, keep=index == 0) for index, r in enumerate(members)}
    return start_on(handle.stage_from_group, updates, timeout_s)


def start_on(method: Any, payloads: dict[str, Any], timeout_s: float) -> dict[str, Future]:
    """Calls `method` (a replica method of the deployment handle) on each replica with its payload,
    all at once; a future per replica for its result."""
    pool = ThreadPoolExecutor(max_workers=max(len(payloads), 1), thread_name_prefix="fleet-group")
    futures = {
        r: pool.submit(method.remote(Targeted(r, p)).result, timeout_s=timeout_s) for r, p in payloads.items()
    }
    pool.shutdown(wait=False)
    return futures


def settle(
    handle: Any,
    list_replicas: Callable[[], list[str]],
    ledger: Any,
    fleet: StagedFleet,
    futures: dict[str, Future],
    in_flight: str,
    timeout_s: float,
) -> int:
    """Waits for every member's staging; commits the fleet when all staged alike, else drops every
    staged copy and raises naming the replicas that refused or failed. A member that fails on its own
    (it died, it refused) ends the wait at once: the others, released by rank 0's abort, drop what
    they hold in the background."""
    views, failed = _outcomes(handle, fleet, futures)
    alike = {(v["relies"], v["complete"]) for v in views.values()}
    if failed or len(alike) > 1:
        discard_everywhere(handle, fleet.replicas, fleet.update_id)
        named = _culprits(failed) or {r: "staged another view of the update than the others" for r in views}
        raise FleetUpdateError(describe_failure("staging", named, fleet.current), fleet.current)
    first = views[fleet.replicas[0]]
    ref = first.get("ref", [None])[0]
    payload = replace(fleet.payload, ref=ref)
    return commit_staged(
        handle, list_replicas, ledger, replace(fleet, payload=payload), first, in_flight, timeout_s
    )


def failures_of(futures: dict[str, Future]) -> dict[str, str]:
    """Waits for each future; {replica: error} of those that failed."""
    failed = {}
    for replica, future in futures.items():
        try:
            future.result()
        except Exception as exc:
            failed[replica] = error_text(exc)
    return failed


def _outcomes(
    handle: Any, fleet: StagedFleet, futures: dict[str, Future]
) -> tuple[dict[str, dict[str, Any]], dict[str, BaseException]]:
    """({replica: staged view}, {replica: error}); returns early on a member's own failure."""
    pending = set(futures.values())
    while pending:
        done, pending = wait(pending, return_when=FIRST_EXCEPTION)
        if pending and any(_own_failure(f) for f in done):
            threading.Thread(target=_drop_later, args=(handle, fleet, pending), daemon=True).start()
            break
    views = {r: f.result() for r, f in futures.items() if f.done() and f.exception() is None}
    failed = {r: f.exception() for r, f in futures.items() if f.done() and f.exception() is not None}
    return views, failed


def _own_failure(future: Future) -> bool:
    exc = future.exception()
    return exc is not None and not _called_off(exc)


def _drop_later(handle: Any, fleet: StagedFleet, pending: set[Future]) -> None:
    wait(pending)
    discard_everywhere(handle, fleet.replicas, fleet.update_id)


def _culprits(failed: dict[str, BaseException]) -> dict[str, str]:
    """The replicas that refused or failed; the ones merely called off because of them only when no
    other failure is known."""
    described = {r: error_text(e) for r, e in failed.items()}
    own = {r: d for r, d in described.items() if not _called_off(failed[r])}
    return own or described


def _called_off(exc: BaseException) -> bool:
    return isinstance(exc, UpdateCalledOff) or UpdateCalledOff.__name__ in str(exc)
