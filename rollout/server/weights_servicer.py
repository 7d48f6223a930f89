"""WeightSyncService: receives weight updates over gRPC, torch.distributed or disk, and commits them.

The servicer converts between protobuf and `rollout.weights`; the transfer happens on the RPC
thread while generation goes on, and only the commit (an in-place copy plus a version bump) runs
on the engine loop's thread: through `run_exclusive` (drains or aborts running requests first) for
the in-flight policy "wait", between two engine steps for "abort", "keep" and "recompute". Errors
before the commit leave the model untouched.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import grpc
import torch
import torch.distributed as dist

from rollout.server.generated import weights_pb2, weights_pb2_grpc
from rollout.weights.buckets import DEFAULT_BUCKET_BYTES, empty_bucket, plan_buckets, unpack
from rollout.weights.disk import load_checkpoint
from rollout.weights.group import GroupSpec, WeightGroup
from rollout.weights.manifest import Manifest, WeightUpdateError, model_targets, validate_manifest
from rollout.weights.updater import StagedWeights, check_next_version
from rollout.weights.wire import (
    DEFAULT_GROUP_TIMEOUT_S,
    GROUP_BACKENDS,
    in_flight_policy,
    manifest_from_proto,
    requested_version,
)

T = TypeVar("T")
SERVICE_NAME = weights_pb2.DESCRIPTOR.services_by_name["WeightSyncService"].full_name


class ExclusiveRunner(Protocol):
    """What the servicer needs from the server's engine loop."""

    engine: Any  # LLMEngine

    def run_exclusive(self, fn: Callable[[Any], T], abort_running: bool = False) -> T: ...

    def call(self, fn: Callable[[Any], T]) -> T: ...


class WeightSyncServicer(weights_pb2_grpc.WeightSyncServiceServicer):
    """One per server. Updates are serialized: a second one waits for the first to commit or fail."""

    def __init__(self, loop: ExclusiveRunner) -> None:
        self._loop = loop
        self._update_lock = threading.Lock()
        self._group: WeightGroup | None = None

    # ---- gRPC stream --------------------------------------------------------------------------

    def UpdateWeights(
        self, request_iterator: Iterator[weights_pb2.UpdateWeightsRequest], context: grpc.ServicerContext
    ):
        with self._update_lock, _status(context):
            header = _first_header(request_iterator)
            manifest = manifest_from_proto(header.manifest)
            self._precheck(manifest, header.options)
            staged = StagedWeights(manifest)
            _receive_chunks(request_iterator, staged, context)
            version = self._commit(staged.named_tensors(), header.options)
        return weights_pb2.UpdateWeightsResponse(
            weight_version=version, num_tensors=len(manifest), num_bytes=manifest.nbytes
        )

    # ---- torch.distributed ----------------------------------------------------------------------

    def InitWeightGroup(self, request: weights_pb2.InitWeightGroupRequest, context: grpc.ServicerContext):
        with _status(context):
            spec = _group_spec(request)
            self._close_group()
            device = _model_device(self._loop.engine) if spec.backend == "nccl" else torch.device("cpu")
            self._group = WeightGroup.join(spec, device)
        return weights_pb2.InitWeightGroupResponse()

    def UpdateWeightsFromGroup(
        self, request: weights_pb2.UpdateWeightsFromGroupRequest, context: grpc.ServicerContext
    ):
        group = self._group
        if group is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no weight group: call InitWeightGroup first")
        with self._update_lock, _status(context):
            manifest = manifest_from_proto(request.manifest)
            refusal = self._refusal(manifest, request.options)
            group.report_ready(request.update_id, refusal)
            if refusal is not None:
                raise WeightUpdateError(refusal)
            if not group.wait_go(request.update_id):
                context.abort(
                    grpc.StatusCode.ABORTED, "the trainer called the update off (another server refused it)"
                )
            tensors = _receive_buckets(group, manifest, request.bucket_bytes or DEFAULT_BUCKET_BYTES)
            version = self._commit(tensors, request.options)
        return weights_pb2.UpdateWeightsFromGroupResponse(weight_version=version)

    def CloseWeightGroup(self, request: weights_pb2.CloseWeightGroupRequest, context: grpc.ServicerContext):
        self._close_group()
        return weights_pb2.CloseWeightGroupResponse()

    # ---- disk ---------------------------------------------------------------------------------

    def UpdateWeightsFromDisk(
        self, request: weights_pb2.UpdateWeightsFromDiskRequest, context: grpc.ServicerContext
    ):
        with self._update_lock, _status(context):
            check_next_version(self._loop.engine.weight_version, requested_version(request.options))
            tensors = load_checkpoint(request.path)
            self._precheck(Manifest.of(tensors), request.options)
            version = self._commit(tensors, request.options)
        return weights_pb2.UpdateWeightsFromDiskResponse(weight_version=version, num_tensors=len(tensors))

    # ---- shared ---------------------------------------------------------------------------------

    def _precheck(self, manifest: Manifest, options: weights_pb2.CommitOptions) -> None:
        """Refuses a bad manifest or version before any byte is received."""
        engine = self._loop.engine
        in_flight_policy(options)
        check_next_version(engine.weight_version, requested_version(options))
        validate_manifest(manifest, model_targets(engine.model))

    def _refusal(self, manifest: Manifest, options: weights_pb2.CommitOptions) -> str | None:
        try:
            self._precheck(manifest, options)
        except WeightUpdateError as err:
            return str(err)
        return None

    def _commit(self, tensors: dict[str, torch.Tensor], options: weights_pb2.CommitOptions) -> int:
        version, policy = requested_version(options), in_flight_policy(options)
        if policy == "wait":
            return self._loop.run_exclusive(
                lambda engine: engine.update_weights(tensors, version), options.abort_running
            )
        # abort / keep / recompute commit between two steps, without waiting for an idle engine
        return self._loop.call(lambda engine: engine.update_weights(tensors, version, in_flight=policy))

    def _close_group(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.close()


def register_weight_sync(server: grpc.Server, loop: ExclusiveRunner) -> WeightSyncServicer:
    """Adds the WeightSyncService to `server` (a `build_server` extra_servicers hook; list
    SERVICE_NAME in extra_service_names for reflection and health)."""
    servicer = WeightSyncServicer(loop)
    weights_pb2_grpc.add_WeightSyncServiceServicer_to_server(servicer, server)
    return servicer


def _first_header(requests: Iterator[weights_pb2.UpdateWeightsRequest]) -> weights_pb2.WeightUpdateHeader:
    first = next(requests, None)
    if first is None or not first.HasField("header"):
        raise WeightUpdateError("the first message of UpdateWeights must carry the header (manifest)")
    return first.header


def _receive_chunks(
    requests: Iterator[weights_pb2.UpdateWeightsRequest], staged: StagedWeights, context
) -> None:
    for message in requests:
        if not message.HasField("chunk"):
            raise WeightUpdateError("only chunks may follow the header")
        staged.write_bytes(message.chunk.offset, message.chunk.data)
    if not staged.complete or not context.is_active():
        # A client that dies or cancels mid-stream surfaces here as a stream that simply ends.
        context.abort(
            grpc.StatusCode.CANCELLED,
            f"stream ended after {staged.num_bytes_received} of {staged.manifest.nbytes} bytes; nothing written",
        )


def _receive_buckets(group: WeightGroup, manifest: Manifest, bucket_bytes: int) -> dict[str, torch.Tensor]:
    """Receives every bucket; the returned tensors are views into the received buffers (no copy)."""
    tensors: dict[str, torch.Tensor] = {}
    for bucket in plan_buckets(manifest, bucket_bytes):
        flat = empty_bucket(bucket, group.device)
        group.broadcast(flat)
        for index, view in unpack(bucket, flat, manifest):
            spec = manifest.tensors[index]
            tensors[spec.name] = view.view(spec.shape)
    return tensors


def _group_spec(request: weights_pb2.InitWeightGroupRequest) -> GroupSpec:
    spec = GroupSpec(
        master_addr=request.master_addr,
        master_port=request.master_port,
        world_size=request.world_size,
        rank=request.rank,
        backend=GROUP_BACKENDS[request.backend],
        timeout_s=request.timeout_s or DEFAULT_GROUP_TIMEOUT_S,
    )
    if spec.rank == 0:
        raise ValueError("rank must be in [1, world_size): rank 0 is the trainer")
    return spec


def _model_device(engine: Any) -> torch.device:
    return next(engine.model.parameters()).device


_STATUS_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (WeightUpdateError, grpc.StatusCode.INVALID_ARGUMENT),
    (FileNotFoundError, grpc.StatusCode.NOT_FOUND),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (dist.DistStoreError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (dist.DistError, grpc.StatusCode.UNAVAILABLE),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (RuntimeError, grpc.StatusCode.FAILED_PRECONDITION),
)


@contextmanager
def _status(context: grpc.ServicerContext) -> Iterator[None]:
    """Maps the errors of an update to gRPC status codes (the model is untouched in each case)."""
    try:
        yield
    except Exception as error:
        if type(error) is Exception:  # context.abort's own signal: pass it through untouched
            raise
        code = next((code for cls, code in _STATUS_CODES if isinstance(error, cls)), grpc.StatusCode.INTERNAL)
        context.abort(code, f"{type(error).__name__}: {error}")
