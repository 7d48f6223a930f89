"""WeightLedger: the fleet's last committed update, for replicas that start after it.

Ray Serve replaces a replica that dies; the replacement loads the model from its flags, version 0.
The ledger (a small named actor, no CPU reserved) keeps the version and the tensors' object ref of
the fleet's last commit, and a new replica applies them before it serves (engine_replica.py), so no
replica ever serves a version the fleet has moved past.
"""

from __future__ import annotations

from typing import Any

import ray

NAMESPACE = "rollout-fleet"


class WeightLedger:
    def __init__(self) -> None:
        self.version = 0
        self.refs: list[ray.ObjectRef] = []

    def record(self, version: int, refs: list[ray.ObjectRef]) -> None:
        self.version, self.refs = version, refs

    def latest(self) -> tuple[int, list[ray.ObjectRef]]:
        return self.version, self.refs


def start_ledger(name: str) -> Any:
    return ray.remote(WeightLedger).options(name=name, namespace=NAMESPACE, num_cpus=0).remote()


def ledger_weights(name: str) -> tuple[int, dict[str, Any]] | None:
    """(version, tensors) of the last committed update, None before any."""
    ledger = ray.get_actor(name, namespace=NAMESPACE)
    version, refs = ray.get(ledger.latest.remote())
    if not refs:
        return None
    return version, ray.get(refs[0])
