"""The fleet front's weight-group RPCs: one gRPC address, one group rank per replica, the fleet's guarantees.

A RolloutClient reads the front's GetServerInfoResponse.weight_group_ranks (the number of live
replicas) and gives the address that many consecutive ranks (rollout/client/group_pusher.py).
`init_group` has live replica i join the trainer's group as rank `request.rank + i`;
`update_from_group` has every member answer the trainer's ready/go handshake itself, receive and
stage, then commits on every replica or none (group_stage.py, fleet_update.commit_staged: the ledger
keeps the received tensors for replacements); `close_group` leaves it.

What the front provides (the handlers in rollout/fleet/grpc_front.py call these with their
`request` and grpc.aio `context`): `front.handle` (the EngineReplica DeploymentHandle),
`front.replicas()` (the live replica ids, as ServeFleet's), `front.ledger` (the fleet's WeightLedger
actor handle: `ray.get_actor(f"{app_name}-ledger", namespace=weight_ledger.NAMESPACE)`), optionally
`front.boot_id` (the boot id its GetServerInfo reports; named in the response's base); its
GetServerInfo answers `weight_group_ranks=len(front.replicas())`. The Ray Serve calls block, so
they run in a worker thread, never on the front's event loop. The members' rank order is kept per
front in a WeakKeyDictionary (the front must be hashable and weak-referenceable, as a plain object is).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import grpc
import ray

from rollout.fleet.fleet_payload import FleetPayload
from rollout.fleet.fleet_update import (
    CONTROL_TIMEOUT_S,
    FleetUpdateError,
    StagedFleet,
    describe_failure,
    each,
    fleet_target,
)
from rollout.fleet.group_member import GroupUpdate
from rollout.fleet.group_stage import failures_of, settle, stage_members, start_on
from rollout.fleet.replica_errors import bounded, error_text
from rollout.fleet.weight_stage import FLEET_POLICIES
from rollout.protocol.generated import weights_pb2
from rollout.protocol.weights_wire import (
    DEFAULT_GROUP_TIMEOUT_S,
    GROUP_BACKENDS,
    in_flight_policy,
    lora_targets,
    manifest_from_proto,
    requested_version,
)
from rollout.weights.buckets import DEFAULT_BUCKET_BYTES
from rollout.weights.group import GroupSpec

UPDATE_TIMEOUT_S = 600.0
_MEMBERS: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()  # front -> rank order


class GroupRefused(Exception):
    """A request the front refuses before any replica is asked: `code` and the message for the client."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


async def init_group(
    front: Any, request: weights_pb2.InitWeightGroupRequest, context: Any
) -> weights_pb2.InitWeightGroupResponse:
    await _answer(context, _init, front, request)
    return weights_pb2.InitWeightGroupResponse()


async def update_from_group(
    front: Any, request: weights_pb2.UpdateWeightsFromGroupRequest, context: Any
) -> weights_pb2.UpdateWeightsFromGroupResponse:
    version, base = await _answer(context, _update, front, request)
    return weights_pb2.UpdateWeightsFromGroupResponse(
        weight_version=version,
        base=weights_pb2.WeightBase(boot_id=getattr(front, "boot_id", ""), version=base),
    )


async def close_group(
    front: Any, request: weights_pb2.CloseWeightGroupRequest, context: Any
) -> weights_pb2.CloseWeightGroupResponse:
    await _answer(context, _close, front)
    return weights_pb2.CloseWeightGroupResponse()


def _init(front: Any, request: weights_pb2.InitWeightGroupRequest) -> None:
    members = list(front.replicas())
    ranks = max(request.num_ranks, 1)
    if ranks != len(members):
        raise GroupRefused(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"num_ranks: the trainer gave this fleet {ranks} ranks, it has {len(members)} live replicas "
            "(GetServerInfo's weight_group_ranks changed since: set the group up again)",
        )
    _close(front)
    timeout_s = request.timeout_s or DEFAULT_GROUP_TIMEOUT_S
    backend = GROUP_BACKENDS[request.backend]
    specs = {
        r: GroupSpec(
            request.master_addr, request.master_port, request.world_size, request.rank + i, backend, timeout_s
        )
        for i, r in enumerate(members)
    }  # ValueError naming a bad field
    failed = failures_of(start_on(front.handle.join_weight_group, specs, timeout_s + CONTROL_TIMEOUT_S))
    if failed:
        each(front.handle.close_weight_group, members, lambda r: None, CONTROL_TIMEOUT_S)
        raise FleetUpdateError(describe_failure("joining the weight group", failed, {}), {})
    _MEMBERS[front] = members


def _update(front: Any, request: weights_pb2.UpdateWeightsFromGroupRequest) -> tuple[int, int]:
    """Stages on every member from the broadcast, commits the fleet; returns (version, base held)."""
    members = _MEMBERS.get(front)
    if members is None:
        raise GroupRefused(grpc.StatusCode.FAILED_PRECONDITION, "no weight group: call InitWeightGroup first")
    live = list(front.replicas())
    if set(live) != set(members):
        _close(front)
        left, joined = sorted(set(members) - set(live)), sorted(set(live) - set(members))
        raise GroupRefused(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"the fleet's replicas changed since InitWeightGroup (left {left}, joined {joined}): "
            "set the group up again",
        )
    options = request.options
    in_flight = "abort" if options.abort_running else in_flight_policy(options)
    if in_flight not in FLEET_POLICIES:
        raise ValueError(f"in_flight: a fleet commits with one of {FLEET_POLICIES}, got {in_flight!r}")
    handle, ledger = front.handle, front.ledger
    current, target = fleet_target(handle, members, requested_version(options))
    lora = lora_targets(options)
    base_version = options.base.version if options.HasField("base") else None
    manifest = manifest_from_proto(request.manifest)
    update = GroupUpdate(
        request.update_id, manifest, target, lora, base_version, request.bucket_bytes or DEFAULT_BUCKET_BYTES
    )
    futures = stage_members(handle, members, update, UPDATE_TIMEOUT_S)
    fleet = StagedFleet(
        update.update_id, members, current, target, FleetPayload(None, None, lora, base_version)
    )
    version = settle(handle, front.replicas, ledger, fleet, futures, in_flight, UPDATE_TIMEOUT_S)
    return version, ray.get(ledger.base.remote())


def _close(front: Any) -> None:
    members = _MEMBERS.pop(front, None)
    if members:
        live = set(front.replicas())
        each(
            front.handle.close_weight_group,
            [r for r in members if r in live],
            lambda r: None,
            CONTROL_TIMEOUT_S,
        )


async def _answer(context: Any, work: Any, *args: Any) -> Any:
    """Runs `work` in a thread; an error aborts the call with its status, naming what failed."""
    try:
        return await asyncio.to_thread(work, *args)
    except GroupRefused as err:
        await context.abort(err.code, bounded(str(err)))
    except FleetUpdateError as err:
        await context.abort(_fleet_code(str(err)), bounded(str(err)))
    except ValueError as err:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded(error_text(err)))
    except Exception as err:  # a Ray call that failed: nothing was committed unless the message says so
        await context.abort(grpc.StatusCode.INTERNAL, bounded(error_text(err)))


def _fleet_code(message: str) -> grpc.StatusCode:
    """A replica's refusal keeps its single server's code: a bad manifest or version is INVALID_ARGUMENT,
    another base FAILED_PRECONDITION; a replica lost or failing otherwise, ABORTED (nothing changed).
    Past the point of no return (a commit that failed on a replica): INTERNAL, the message says which."""
    if "while committing" in message or "while catching up" in message:
        return grpc.StatusCode.INTERNAL
    if "BaseMismatchError" in message:
        return grpc.StatusCode.FAILED_PRECONDITION
    if "WeightUpdateError" in message or "ValueError" in message:
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.ABORTED
