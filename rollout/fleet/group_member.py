"""One replica's side of a fleet push over torch.distributed: join the trainer's group, receive into the stage.

The replica checks the manifest against its engine and answers ready or why not through the trainer's
store (rollout/weights/group.py's handshake); on go it receives the buckets and stages them
(weight_stage.py), writing nothing: the fleet commits only once every replica staged (fleet_update.py).
The replica told to `keep` also copies what it received into Ray's object store, owned by the fleet's
ledger actor (not by this replica, which may be the one that dies), so a replacement replays it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray
import torch

from rollout.fleet.weight_ledger import NAMESPACE
from rollout.fleet.weight_stage import StagedUpdate, WeightStage
from rollout.weights.buckets import receive_buckets
from rollout.weights.group import GroupSpec, WeightGroup
from rollout.weights.lora import LoraTargets, validate_update
from rollout.weights.manifest import Manifest, WeightUpdateError, model_targets
from rollout.weights.updater import check_next_version
from rollout.weights.weight_base import BaseMismatchError, WeightBase, check_base, relies_on_held_base


class UpdateCalledOff(RuntimeError):
    """The trainer announced abort: another member refused the update or left the group."""


@dataclass(frozen=True)
class GroupUpdate:
    """What a replica needs to take one broadcast: the same manifest and bucket plan as the trainer."""

    update_id: str
    manifest: Manifest
    version: int
    lora: LoraTargets | None = None
    base_version: int | None = None  # the held base the adapters merge into, when they rely on it
    bucket_bytes: int = 256 * 1024 * 1024
    keep: bool = False  # put the received tensors into Ray's store for the ledger


class GroupMember:
    def __init__(self, loop: Any, stage: WeightStage, ledger: str | None, name: str = "") -> None:
        self.loop = loop  # rollout.server.engine_loop.EngineLoop
        self.name = name  # the replica's id: a refusal names it (the trainer reads it from the store)
        self.stage = stage
        self.ledger = ledger
        self.group: WeightGroup | None = None

    def join(self, spec: GroupSpec) -> None:
        """Leaves any group held, then joins the trainer's (blocks until every member joined)."""
        self.close()
        device = torch.device("cpu")
        if spec.backend == "nccl":
            device = self.loop.call(lambda engine: next(engine.model.parameters()).device)
        self.group = WeightGroup.join(spec, device)

    def receive(self, update: GroupUpdate) -> dict[str, Any]:
        """Answers the handshake, receives on go and stages; returns the stage's view (`relies`,
        `complete`) and, when kept, `ref`: [the ledger-owned object of the received tensors]."""
        group = self.group
        if group is None:
            raise RuntimeError("no weight group on this replica: init the fleet's weight group first")
        refusal = self._refusal(update)
        group.report_ready(update.update_id, refusal)
        if refusal is not None:
            raise WeightUpdateError(refusal)
        if not group.wait_go(update.update_id):
            raise UpdateCalledOff("the trainer called the update off (another member refused it or left)")
        try:
            tensors = receive_buckets(group, update.manifest, update.bucket_bytes)
        except Exception:
            self.close()  # a collective that failed midway leaves the group unusable
            raise
        staged = StagedUpdate(tensors, update.version, update.lora, update.base_version)
        view = self.stage.stage(update.update_id, staged)
        if update.keep and self.ledger is not None:
            view["ref"] = [self._keep(tensors)]  # in a list: Ray hands a nested ref over as is
        return view

    def close(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            group.close()

    def _refusal(self, update: GroupUpdate) -> str | None:
        """Why this replica cannot take the update (names, shapes, dtypes, version, base), or None."""

        def check(engine: Any) -> None:
            check_next_version(engine.weight_version, update.version)
            validate_update(update.manifest, model_targets(engine.model), update.lora)
            names = (spec.name for spec in update.manifest.tensors)
            named = None if update.base_version is None else WeightBase("", update.base_version)
            held = WeightBase("", engine.weights.adapters.base_version)
            check_base(named, held, relies_on_held_base(names, update.lora))

        try:
            self.loop.call(check)
        except (WeightUpdateError, BaseMismatchError, ValueError) as err:
            return f"replica {self.name}: {type(err).__name__}: {err}"
        return None

    def _keep(self, tensors: dict[str, torch.Tensor]) -> Any:
        """The received tensors (views into the buckets: copied out, or each would carry its whole
        bucket) put into Ray's store by the ledger actor, its owner."""
        ledger = ray.get_actor(self.ledger, namespace=NAMESPACE)
        copies = {name: t.detach().to("cpu", copy=True) for name, t in tensors.items()}
        return ray.get(ledger.keep.remote(copies))[0]
