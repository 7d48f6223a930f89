"""A weight update of the whole fleet: stage on every replica, then commit, or change nothing.

1. Stage: every replica receives the update (FleetPayload: the tensors as one object in Ray's store,
   or a safetensors directory each reads; LoRA factors merged on the fleet's base as a single server
   merges them) and validates it against its engine, the next version and that base, writing nothing.
   Replicas that read different files from a disk directory refuse it too. One failure: every replica drops
   what it staged and the fleet stays on version v (FleetUpdateError names the replica).
2. Hold every replica (no new request reaches an engine), record the update in the ledger (a
   replica replacing a dead one loads it), commit on every replica once its engine is idle, release.
   No replica serves v+1 before all staged it, and no request admitted after the release sees v.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from rollout.fleet.fleet_payload import FleetPayload
from rollout.fleet.replica_calls import Targeted
from rollout.fleet.replica_errors import error_text

CONTROL_TIMEOUT_S = 120.0


class FleetUpdateError(RuntimeError):
    """The update did not land; `versions` says what each replica serves now."""

    def __init__(self, message: str, versions: dict[str, int]) -> None:
        super().__init__(message)
        self.versions = versions


def push_to_fleet(
    handle: Any,
    list_replicas: Callable[[], list[str]],
    ledger: Any,
    payload: FleetPayload,
    version: int | None = None,
    in_flight: str = "wait",
    timeout_s: float = 600.0,
) -> int:
    """Updates every live replica (`list_replicas()`: Ray Serve ids) atomically; returns the version."""
    replicas = list_replicas()
    current, target = fleet_target(handle, replicas, version)
    update_id = uuid.uuid4().hex
    payload = FleetPayload(payload.ref, payload.path, payload.lora, ray.get(ledger.base.remote()))
    staged, failed = each(handle.stage_weights, replicas, lambda r: (update_id, payload, target), timeout_s)
    failed |= _disagreeing(staged)
    if failed:
        discard_everywhere(handle, replicas, update_id)
        raise FleetUpdateError(describe_failure("staging", failed, current), current)
    first = next(iter(staged.values()))
    fleet = StagedFleet(update_id, replicas, current, target, payload.with_fingerprint(first["fingerprint"]))
    return commit_staged(handle, list_replicas, ledger, fleet, first, in_flight, timeout_s)


@dataclass(frozen=True)
class StagedFleet:
    """An update staged on every replica of `replicas` under `update_id`, from `current` to `target`;
    `payload` is what the ledger records for replicas that start later."""

    update_id: str
    replicas: list[str]
    current: dict[str, int]
    target: int
    payload: FleetPayload


def fleet_target(handle: Any, replicas: list[str], version: int | None) -> tuple[dict[str, int], int]:
    """({replica: version serving}, the version the update sets); refuses a fleet on mixed versions."""
    current = versions(handle, replicas)
    if len(set(current.values())) != 1:
        raise FleetUpdateError(f"the replicas serve different versions {current}; nothing changed", current)
    return current, version if version is not None else next(iter(current.values())) + 1


def commit_staged(
    handle: Any,
    list_replicas: Callable[[], list[str]],
    ledger: Any,
    fleet: StagedFleet,
    view: dict[str, Any],
    in_flight: str = "wait",
    timeout_s: float = 600.0,
) -> int:
    """Step 2 for an update every replica staged (`view`: what they reported alike): hold, record,
    commit, release; a replica that started meanwhile catches up from the ledger's record."""
    replicas, update_id, current, target = fleet.replicas, fleet.update_id, fleet.current, fleet.target
    _, failed = each(handle.hold, replicas, lambda r: None, CONTROL_TIMEOUT_S)
    try:
        if failed:
            discard_everywhere(handle, replicas, update_id)
            raise FleetUpdateError(describe_failure("holding", failed, current), current)
        ray.get(ledger.record.remote(target, fleet.payload, not view["relies"], view["complete"]))
        _, failed = each(handle.commit_weights, replicas, lambda r: (update_id, in_flight), timeout_s)
    finally:
        each(handle.release, replicas, lambda r: None, CONTROL_TIMEOUT_S)
    if failed:  # past the point of no return: the ledger brings a replaced replica to `target`
        raise FleetUpdateError(describe_failure("committing", failed, {}), versions(handle, replicas, True))
    late = [r for r in list_replicas() if r not in replicas]
    _catch_up_late(handle, late, update_id, fleet.payload, target, timeout_s)
    return target


def discard_everywhere(handle: Any, replicas: list[str], update_id: str) -> None:
    each(handle.discard_weights, replicas, lambda r: update_id, CONTROL_TIMEOUT_S)


def _disagreeing(staged: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Replicas whose view of the update (the disk files read, whether it merges into the base held)
    differs from the first one's: a directory that is not the same everywhere is refused."""
    views = {r: (s["fingerprint"], s["relies"], s["complete"]) for r, s in staged.items()}
    first = next(iter(views.values()), None)
    return {
        r: f"read another checkpoint than the other replicas (files {v[0]!r})"
        for r, v in views.items()
        if v != first
    }


def _catch_up_late(
    handle: Any, late: list[str], update_id: str, payload: FleetPayload, target: int, timeout_s: float
) -> None:
    """A replica that started during the update (it read the ledger before the record) gets it too."""
    behind = [r for r, v in versions(handle, late, tolerant=True).items() if v < target]
    if not behind:
        return
    _, failed = each(handle.stage_weights, behind, lambda r: (update_id, payload, target), timeout_s)
    each(handle.hold, behind, lambda r: None, CONTROL_TIMEOUT_S)
    try:
        failed |= each(handle.commit_weights, behind, lambda r: (update_id, "wait"), timeout_s)[1]
    finally:
        each(handle.release, behind, lambda r: None, CONTROL_TIMEOUT_S)
    if failed:
        raise FleetUpdateError(
            describe_failure("catching up a new replica", failed, {}), versions(handle, late, True)
        )


def versions(handle: Any, replicas: list[str], tolerant: bool = False) -> dict[str, int]:
    out: dict[str, int] = {}
    for replica in replicas:
        try:
            out[replica] = handle.stats.remote(Targeted(replica)).result(timeout_s=CONTROL_TIMEOUT_S)[
                "weight_version"
            ]
        except Exception:
            if not tolerant:
                raise
    return out


def each(
    method: Any, replicas: list[str], payload: Callable[[str], Any], timeout_s: float
) -> tuple[dict[str, Any], dict[str, str]]:
    """Calls `method` on every replica at once; returns ({replica: result}, {replica: error})."""
    responses = {r: method.remote(Targeted(r, payload(r))) for r in replicas}
    results, failed = {}, {}
    for replica, response in responses.items():
        try:
            results[replica] = response.result(timeout_s=timeout_s)
        except Exception as exc:  # a replica's refusal or its death: named in the error
            failed[replica] = error_text(exc)
    return results, failed


def describe_failure(phase: str, failed: dict[str, str], current: dict[str, int]) -> str:
    named = "; ".join(f"replica {r}: {e}" for r, e in failed.items())
    kept = f"; every replica still serves version {next(iter(current.values()))}" if current else ""
    return f"fleet weight update failed while {phase} ({named}){kept}"
