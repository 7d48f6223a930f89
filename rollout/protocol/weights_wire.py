"""Conversions between the weight-update protobuf messages and `rollout.weights` objects.

Shared by the server's WeightSyncServicer and the trainer-side pusher so both read the manifest
and the commit options the same way.
"""

from __future__ import annotations

from rollout.protocol.generated import weights_pb2
from rollout.weights.group import GroupSpec
from rollout.weights.lora import LoraTarget, LoraTargets
from rollout.weights.manifest import Manifest, TensorSpec
from rollout.weights.weight_base import WeightBase

GROUP_BACKENDS = {
    weights_pb2.WEIGHT_GROUP_BACKEND_UNSPECIFIED: "gloo",
    weights_pb2.WEIGHT_GROUP_BACKEND_GLOO: "gloo",
    weights_pb2.WEIGHT_GROUP_BACKEND_NCCL: "nccl",
}
DEFAULT_GROUP_TIMEOUT_S = 120.0
IN_FLIGHT_TO_PB = {
    "wait": weights_pb2.IN_FLIGHT_POLICY_WAIT,
    "abort": weights_pb2.IN_FLIGHT_POLICY_ABORT,
    "keep": weights_pb2.IN_FLIGHT_POLICY_KEEP,
    "recompute": weights_pb2.IN_FLIGHT_POLICY_RECOMPUTE,
}
_IN_FLIGHT_FROM_PB = {v: k for k, v in IN_FLIGHT_TO_PB.items()}


def manifest_to_proto(manifest: Manifest) -> weights_pb2.WeightManifest:
    specs = [weights_pb2.TensorSpec(name=s.name, shape=s.shape, dtype=s.dtype) for s in manifest.tensors]
    return weights_pb2.WeightManifest(tensors=specs)


def manifest_from_proto(message: weights_pb2.WeightManifest) -> Manifest:
    return Manifest(tuple(TensorSpec(t.name, tuple(t.shape), t.dtype) for t in message.tensors))


def commit_options(
    version: int | None,
    abort_running: bool,
    in_flight: str = "wait",
    update_id: str = "",
    lora: LoraTargets | None = None,
    base: WeightBase | None = None,
) -> weights_pb2.CommitOptions:
    if in_flight not in IN_FLIGHT_TO_PB:
        raise ValueError(f"in_flight must be one of {tuple(IN_FLIGHT_TO_PB)}, got {in_flight!r}")
    return weights_pb2.CommitOptions(
        version=version,
        abort_running=abort_running,
        in_flight=IN_FLIGHT_TO_PB[in_flight],
        update_id=update_id,
        lora_targets=lora_targets_to_proto(lora or {}),
        base=None if base is None else base_to_proto(base),
    )


def base_to_proto(base: WeightBase) -> weights_pb2.WeightBase:
    return weights_pb2.WeightBase(boot_id=base.boot_id, version=base.version)


def base_from_proto(message: weights_pb2.WeightBase) -> WeightBase:
    return WeightBase(message.boot_id, message.version)


def named_base(options: weights_pb2.CommitOptions) -> WeightBase | None:
    """The base an update names (CommitOptions.base), or None."""
    return base_from_proto(options.base) if options.HasField("base") else None


def lora_targets_to_proto(lora: LoraTargets) -> list[weights_pb2.LoraTarget]:
    return [
        weights_pb2.LoraTarget(
            module=module, scaling=t.scaling, fan_in_fan_out=t.fan_in_fan_out, parameter=t.parameter
        )
        for module, t in lora.items()
    ]


def lora_targets(options: weights_pb2.CommitOptions) -> dict[str, LoraTarget] | None:
    """The update's LoRA targets by module (None: no adapters); ValueError naming a module listed twice."""
    targets: dict[str, LoraTarget] = {}
    for t in options.lora_targets:
        if t.module in targets:
            raise ValueError(f"lora_targets: module {t.module!r} listed twice")
        targets[t.module] = LoraTarget(t.scaling, t.fan_in_fan_out, t.parameter)
    return targets or None


def in_flight_policy(options: weights_pb2.CommitOptions) -> str:
    """The commit's in-flight policy name; unset means "wait". Raises ValueError naming the field."""
    if options.in_flight == weights_pb2.IN_FLIGHT_POLICY_UNSPECIFIED:
        return "wait"
    policy = _IN_FLIGHT_FROM_PB.get(options.in_flight)
    if policy is None:
        raise ValueError(f"in_flight: unknown value {options.in_flight}")
    if options.abort_running and policy != "wait":
        raise ValueError(f"abort_running: only with in_flight wait (or unset), got in_flight {policy}")
    return policy


def requested_version(options: weights_pb2.CommitOptions) -> int | None:
    return options.version if options.HasField("version") else None


def backend_to_proto(backend: str) -> int:
    return {"gloo": weights_pb2.WEIGHT_GROUP_BACKEND_GLOO, "nccl": weights_pb2.WEIGHT_GROUP_BACKEND_NCCL}[
        backend
    ]


def group_spec_from_proto(request: weights_pb2.InitWeightGroupRequest, timeout_s: float) -> GroupSpec:
    """A server's side of the group; ValueError for rank 0 (the trainer's) or for more than one rank
    (a fleet's front takes one per replica, rollout/fleet/group_fanout.py)."""
    if request.num_ranks > 1:
        raise ValueError(f"num_ranks: this server takes one rank in a weight group, got {request.num_ranks}")
    spec = GroupSpec(
        master_addr=request.master_addr,
        master_port=request.master_port,
        world_size=request.world_size,
        rank=request.rank,
        backend=GROUP_BACKENDS[request.backend],
        timeout_s=timeout_s,
    )
    if spec.rank == 0:
        raise ValueError("rank must be in [1, world_size): rank 0 is the trainer")
    return spec
