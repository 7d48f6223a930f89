"""ServeFleet's torch.distributed pushes: this process (the trainer) is rank 0, the live replicas ranks 1..N.

`FleetGroup.init` hosts the group's store (rollout/weights/group.py) and has each live replica join
in `members` order; `push` runs the group's ready/go handshake with every replica staging what it
receives (group_stage.py), then the fleet's commit. The group lasts across pushes; when the live
replicas change (one died, Ray Serve started a replacement), the next push sets up a new group with
the same options first. A lost member calls the update off and closes the group.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import ray
import torch

from rollout.fleet.fleet_payload import FleetPayload
from rollout.fleet.fleet_update import (
    CONTROL_TIMEOUT_S,
    FleetUpdateError,
    StagedFleet,
    describe_failure,
    discard_everywhere,
    each,
    fleet_target,
)
from rollout.fleet.group_member import GroupUpdate
from rollout.fleet.group_stage import failures_of, settle, stage_members, start_on
from rollout.protocol.weights_wire import DEFAULT_GROUP_TIMEOUT_S
from rollout.weights.buckets import DEFAULT_BUCKET_BYTES, pack, plan_buckets
from rollout.weights.group import READY_OK, GroupSpec, WeightGroup, host_store
from rollout.weights.lora import LoraTargets
from rollout.weights.manifest import Manifest


@dataclass(frozen=True)
class GroupOptions:
    """As `RolloutClient`'s group: `master_addr` is this machine's address as the replicas reach it
    (port 0: a free one); gloo for CPU tensors, nccl for CUDA ones (`device`: where rank 0's buffers
    live); `timeout_s` bounds the join, the handshake and every broadcast."""

    master_addr: str = "127.0.0.1"
    master_port: int = 0
    backend: str = "gloo"
    timeout_s: float = DEFAULT_GROUP_TIMEOUT_S
    device: torch.device | None = None


class FleetGroup:
    def __init__(self, handle: Any, list_replicas: Callable[[], list[str]], ledger: Any) -> None:
        self.handle, self.list_replicas, self.ledger = handle, list_replicas, ledger
        self.options: GroupOptions | None = None
        self.members: list[str] = []  # replica i has rank i + 1
        self.group: WeightGroup | None = None

    def init(self, options: GroupOptions) -> None:
        """Sets up the group over the live replicas; FleetUpdateError names a replica that failed to join."""
        self.close()
        members = self.list_replicas()
        world = len(members) + 1
        store = host_store(options.master_addr, options.master_port, world, options.timeout_s)
        spec = GroupSpec(options.master_addr, store.port, world, 0, options.backend, options.timeout_s)
        specs = {r: replace(spec, rank=rank) for rank, r in enumerate(members, 1)}
        joins = start_on(self.handle.join_weight_group, specs, options.timeout_s + CONTROL_TIMEOUT_S)
        try:
            group = WeightGroup(spec, store, options.device)
        except Exception as err:
            failed = failures_of({r: f for r, f in joins.items() if f.done()}) or dict.fromkeys(
                members, str(err)
            )
            self._close_members(members)
            raise FleetUpdateError(describe_failure("joining the weight group", failed, {}), {}) from err
        failed = failures_of(joins)
        if failed:
            group.close()
            self._close_members(members)
            raise FleetUpdateError(describe_failure("joining the weight group", failed, {}), {})
        self.group, self.members, self.options = group, members, options

    def push(
        self,
        named: list[tuple[str, torch.Tensor]],
        version: int | None = None,
        in_flight: str = "wait",
        lora: LoraTargets | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        timeout_s: float = 600.0,
    ) -> int:
        """Broadcasts `named` to every replica, committed on all or none; returns the version."""
        if self.group is None or set(self.members) != set(self.list_replicas()):
            self.init(self.options or GroupOptions())
        group, members = self.group, self.members
        assert group is not None
        current, target = fleet_target(self.handle, members, version)
        manifest = Manifest.of(named)
        base_version = ray.get(self.ledger.base.remote())
        update = GroupUpdate(uuid.uuid4().hex, manifest, target, lora, base_version, bucket_bytes)
        futures = stage_members(self.handle, members, update, timeout_s)
        refusals, lost = self._await_ready(group, update.update_id, futures)
        group.announce(update.update_id, go=not (refusals or lost))
        if lost:
            self.close()  # a member left the group: the next push sets up a new one
        fleet = StagedFleet(
            update.update_id, members, current, target, FleetPayload(None, None, lora, base_version)
        )
        if not (refusals or lost):
            try:
                tensors = [tensor for _, tensor in named]
                for bucket in plan_buckets(manifest, bucket_bytes):
                    group.broadcast(pack(bucket, tensors, group.device))
            except Exception as err:
                self._drop(fleet, futures)
                failed = {"rank 0 (this process)": f"{type(err).__name__}: {err}"}
                raise FleetUpdateError(describe_failure("broadcasting", failed, current), current) from err
        return settle(self.handle, self.list_replicas, self.ledger, fleet, futures, in_flight, timeout_s)

    def close(self) -> None:
        """Leaves the group here and on its members (they rejoin at the next init)."""
        group, self.group = self.group, None
        members, self.members = self.members, []
        if group is not None:
            group.close()
            self._close_members([r for r in members if r in set(self.list_replicas())])

    def _close_members(self, members: list[str]) -> None:
        each(self.handle.close_weight_group, members, lambda r: None, CONTROL_TIMEOUT_S)

    def _drop(self, fleet: StagedFleet, futures: dict[str, Future]) -> None:
        """After a broadcast that failed here: waits for the members, drops whatever they staged."""
        failures_of(futures)
        self.close()
        discard_everywhere(self.handle, fleet.replicas, fleet.update_id)

    def _await_ready(
        self, group: WeightGroup, update_id: str, futures: dict[str, Future]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """({replica: refusal}, {replica: why it is lost}) once every member answered or failed, or the
        group's deadline passed (the silent ones are lost)."""
        ranks = dict(enumerate(self.members, 1))
        deadline = time.monotonic() + group.spec.timeout_s
        while True:
            answers = {ranks[rank]: why for rank, why in group.answers(update_id).items()}
            pending = {r: f for r, f in futures.items() if r not in answers}
            lost = failures_of({r: f for r, f in pending.items() if f.done()})
            refusals = {r: why for r, why in answers.items() if why != READY_OK}
            if len(answers) + len(lost) == len(ranks):
                return refusals, lost
            if time.monotonic() > deadline:
                silent = {r: f"no answer within {group.spec.timeout_s:g} s" for r in pending if r not in lost}
                return refusals, {**lost, **silent}
            time.sleep(0.005)
