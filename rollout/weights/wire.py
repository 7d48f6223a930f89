"""Conversions between the weight-update protobuf messages and `rollout.weights` objects.

Shared by the server's WeightSyncServicer and the trainer-side pusher so both read the manifest
and the commit options the same way.
"""

from __future__ import annotations

from rollout.server.generated import weights_pb2
from rollout.weights.manifest import Manifest, TensorSpec

GROUP_BACKENDS = {
    weights_pb2.WEIGHT_GROUP_BACKEND_UNSPECIFIED: "gloo",
    weights_pb2.WEIGHT_GROUP_BACKEND_GLOO: "gloo",
    weights_pb2.WEIGHT_GROUP_BACKEND_NCCL: "nccl",
}
DEFAULT_GROUP_TIMEOUT_S = 120.0


def manifest_to_proto(manifest: Manifest) -> weights_pb2.WeightManifest:
    specs = [weights_pb2.TensorSpec(name=s.name, shape=s.shape, dtype=s.dtype) for s in manifest.tensors]
    return weights_pb2.WeightManifest(tensors=specs)


def manifest_from_proto(message: weights_pb2.WeightManifest) -> Manifest:
    return Manifest(tuple(TensorSpec(t.name, tuple(t.shape), t.dtype) for t in message.tensors))


def commit_options(
    version: int | None, abort_running: bool, update_id: str = ""
) -> weights_pb2.CommitOptions:
    return weights_pb2.CommitOptions(version=version, abort_running=abort_running, update_id=update_id)


def requested_version(options: weights_pb2.CommitOptions) -> int | None:
    return options.version if options.HasField("version") else None


def backend_to_proto(backend: str) -> int:
    return {"gloo": weights_pb2.WEIGHT_GROUP_BACKEND_GLOO, "nccl": weights_pb2.WEIGHT_GROUP_BACKEND_NCCL}[
        backend
    ]
