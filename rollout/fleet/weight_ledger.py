"""WeightLedger: the fleet's committed updates, for replicas that start after them.

Ray Serve replaces a replica that dies; the replacement loads the model from its flags, version 0.
The ledger (a small named actor, no CPU reserved) keeps the committed updates in order since the
last one that wrote every weight (a FleetPayload: the tensors' object ref or the disk directory, LoRA
targets), and a new replica replays them before it serves (engine_replica.py): an adapter merges into the base the updates
before it left, so no replica ever serves weights the fleet has moved past. `base_version` is the
base the fleet's replicas hold (the last update that did not merge into the held one). It also
keeps the fleet's id (the boot id its gRPC front answers with: the fleet's weights outlive any one
process) and whether the fleet sleeps, which a replacement replica copies (replica_sleep.py).
"""

from __future__ import annotations

import uuid
from typing import Any

import ray

NAMESPACE = "rollout-fleet"


class WeightLedger:
    def __init__(self) -> None:
        self.entries: list[tuple[int, Any]] = []  # (version, FleetPayload)
        self.base_version = 0
        self.fleet_id = uuid.uuid4().hex
        self.sleeping: tuple[int, tuple[str, ...]] | None = None  # (level, tags asleep) or awake

    def record(self, version: int, payload: Any, replaces_base: bool, complete: bool) -> None:
        """An update that writes every weight (`complete`) makes the ones before it moot: their
        tensors leave Ray's store."""
        self.entries = [(version, payload)] if complete else [*self.entries, (version, payload)]
        if replaces_base:
            self.base_version = version

    def latest(self) -> list[tuple[int, Any]]:
        return list(self.entries)

    def base(self) -> int:
        return self.base_version

    def keep(self, tensors: dict[str, Any]) -> list[Any]:
        """[a ref to `tensors` in Ray's store, owned by the ledger]: what a replica received over a
        process group (group_member.py), kept by the actor that outlives any replica."""
        return [ray.put(tensors)]

    def id(self) -> str:
        return self.fleet_id

    def set_sleeping(self, state: tuple[int, tuple[str, ...]] | None) -> None:
        self.sleeping = state

    def sleep_state(self) -> tuple[int, tuple[str, ...]] | None:
        return self.sleeping


def start_ledger(name: str) -> Any:
    return ray.remote(WeightLedger).options(name=name, namespace=NAMESPACE, num_cpus=0).remote()


def ledger_updates(name: str) -> list[tuple[int, Any]]:
    """(version, FleetPayload) of every committed update, oldest first."""
    ledger = ray.get_actor(name, namespace=NAMESPACE)
    return ray.get(ledger.latest.remote())
