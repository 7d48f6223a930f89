"""WeightSyncService: receives weight updates over gRPC, torch.distributed, disk or shared memory, and commits them.

The servicer converts between protobuf and `rollout.weights`; the transfer happens on the RPC
thread while generation goes on, and only the commit (an in-place copy plus a version bump) runs
on the engine loop's thread as a job bound to the RPC (`update_commit.py`: dropped if the caller
leaves or its deadline passes first; a retried update id is answered, not re-applied). The in-flight
policy "wait" commits as an exclusive job (running requests drain or are aborted first); "abort",
"keep" and "recompute" commit between two engine steps. Every wait on a peer has an idle timeout.
Errors before the commit leave the model untouched. An adapter update whose adapters merge into the
held base must name it (this process's boot id and base version); another base is FAILED_PRECONDITION.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import torch
import torch.distributed as dist

from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.shared_wire import manifest_of, views_from_proto
from rollout.protocol.weights_wire import (
    DEFAULT_GROUP_TIMEOUT_S,
    base_to_proto,
    group_spec_from_proto,
    manifest_from_proto,
)
from rollout.server.idle_stream import IdleTimeoutStream
from rollout.server.same_host import check_same_host
from rollout.server.update_commit import (
    CallerGoneError,
    ExclusiveSubmitter,
    UpdateRequest,
    commit_for_call,
    deadline_seconds,
    held_base,
    precheck_version,
)
from rollout.weights.buckets import DEFAULT_BUCKET_BYTES, receive_buckets
from rollout.weights.disk import load_checkpoint
from rollout.weights.group import WeightGroup
from rollout.weights.ledger import UpdateLedger
from rollout.weights.lora import validate_update
from rollout.weights.manifest import Manifest, WeightUpdateError, model_targets
from rollout.weights.shared import open_view
from rollout.weights.updater import StagedWeights
from rollout.weights.weight_base import BaseMismatchError, WeightBase, check_base, relies_on_held_base

SERVICE_NAME = weights_pb2.DESCRIPTOR.services_by_name["WeightSyncService"].full_name


DEFAULT_IDLE_TIMEOUT_S = 120.0


class WeightSyncServicer(weights_pb2_grpc.WeightSyncServiceServicer):
    """One per server. Updates are serialized: a second one waits for the first to commit or fail.

    `idle_timeout_s` bounds every wait on a peer: a gap between two messages of an update stream,
    and the group's join, handshake and broadcasts (a longer `timeout_s` in a request is capped).
    `boot_id` is this server process's, which the bases it holds are named by (weight_base.py).
    """

    def __init__(
        self, loop: ExclusiveSubmitter, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, boot_id: str = ""
    ) -> None:
        if idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {idle_timeout_s}")
        self._loop = loop
        self._boot_id = boot_id
        self._idle_timeout_s = idle_timeout_s
        self._update_lock = threading.Lock()
        self._ledger = UpdateLedger()
        self._group: WeightGroup | None = None

    # ---- gRPC stream --------------------------------------------------------------------------

    def UpdateWeights(
        self, request_iterator: Iterator[weights_pb2.UpdateWeightsRequest], context: grpc.ServicerContext
    ):
        messages = IdleTimeoutStream(request_iterator, self._idle_timeout_s)
        try:
            with _status(context), self._one_update(context):
                header = _first_header(messages)
                manifest = manifest_from_proto(header.manifest)
                update = UpdateRequest(header.options)
                version, base = self._precheck(manifest, update), self._held()
                if version is None:
                    staged = StagedWeights(manifest)
                    _receive_chunks(messages, staged, context)
                    version, base = self._commit(staged.named_tensors(), update, context)
        finally:
            messages.close()
        return weights_pb2.UpdateWeightsResponse(
            weight_version=version,
            num_tensors=len(manifest),
            num_bytes=manifest.nbytes,
            base=base_to_proto(base),
        )

    # ---- torch.distributed ----------------------------------------------------------------------

    def InitWeightGroup(self, request: weights_pb2.InitWeightGroupRequest, context: grpc.ServicerContext):
        with _status(context):
            timeout_s = min(request.timeout_s or DEFAULT_GROUP_TIMEOUT_S, self._idle_timeout_s)
            spec = group_spec_from_proto(request, timeout_s)
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
        with _status(context), self._one_update(context):
            manifest = manifest_from_proto(request.manifest)
            update = UpdateRequest(request.options)
            refusal = self._refusal(manifest, update)
            group.report_ready(request.update_id, None if refusal is None else str(refusal))
            if refusal is not None:
                raise refusal
            if not group.wait_go(request.update_id):
                context.abort(
                    grpc.StatusCode.ABORTED, "the trainer called the update off (another server refused it)"
                )
            tensors = receive_buckets(group, manifest, request.bucket_bytes or DEFAULT_BUCKET_BYTES)
            version, base = self._commit(tensors, update, context)
        return weights_pb2.UpdateWeightsFromGroupResponse(weight_version=version, base=base_to_proto(base))

    def CloseWeightGroup(self, request: weights_pb2.CloseWeightGroupRequest, context: grpc.ServicerContext):
        self._close_group()
        return weights_pb2.CloseWeightGroupResponse()

    # ---- disk ---------------------------------------------------------------------------------

    def UpdateWeightsFromDisk(
        self, request: weights_pb2.UpdateWeightsFromDiskRequest, context: grpc.ServicerContext
    ):
        with _status(context), self._one_update(context):
            update = UpdateRequest(request.options)
            version, base = precheck_version(self._loop.engine, self._ledger, update), self._held()
            if version is None:
                tensors = load_checkpoint(request.path)
                self._precheck(Manifest.of(tensors), update)
                version, base = self._commit(tensors, update, context)
            else:
                tensors = {}
        return weights_pb2.UpdateWeightsFromDiskResponse(
            weight_version=version, num_tensors=len(tensors), base=base_to_proto(base)
        )

    # ---- shared memory / CUDA IPC (same machine) ---------------------------------------------------

    def UpdateWeightsFromShared(
        self, request: weights_pb2.UpdateWeightsFromSharedRequest, context: grpc.ServicerContext
    ):
        with _status(context), self._one_update(context):
            check_same_host(context.peer(), request.host.boot_id, request.host.hostname)
            views = views_from_proto(request.tensors)
            manifest = manifest_of(views)
            update = UpdateRequest(request.options)
            version, base = self._precheck(manifest, update), self._held()
            if version is None:
                # CPU segments are read into this process's memory now (pread: a trainer that truncates
                # its segment later cannot crash the commit); CUDA handles are mapped
                tensors = {view.spec.name: open_view(view) for view in views}
                version, base = self._commit(tensors, update, context)
                del tensors  # frees (or unmaps) now, not at the next collection
        return weights_pb2.UpdateWeightsFromSharedResponse(
            weight_version=version,
            num_tensors=len(manifest),
            num_bytes=manifest.nbytes,
            base=base_to_proto(base),
        )

    # ---- common to every transport ---------------------------------------------------------------

    @contextmanager
    def _one_update(self, context: grpc.ServicerContext) -> Iterator[None]:
        """Holds the update lock; ABORTED if another update holds it past this call's deadline."""
        timeout = deadline_seconds(context)
        if not self._update_lock.acquire(timeout=-1 if timeout is None else timeout):
            context.abort(
                grpc.StatusCode.ABORTED, "another weight update held the server until this call's deadline"
            )
        try:
            yield
        finally:
            self._update_lock.release()

    def _precheck(self, manifest: Manifest, update: UpdateRequest) -> int | None:
        """Refuses a bad manifest, version or base before any byte is received; returns the version a
        retried update id already set (nothing to receive then), else None."""
        engine = self._loop.engine
        known = precheck_version(engine, self._ledger, update)
        validate_update(manifest, model_targets(engine.model), update.lora)
        if known is None:  # checked again on the loop thread at the commit
            relies = relies_on_held_base((spec.name for spec in manifest.tensors), update.lora)
            check_base(update.base, self._held(), relies)
        return known

    def _refusal(self, manifest: Manifest, update: UpdateRequest) -> Exception | None:
        try:
            self._precheck(manifest, update)
        except (WeightUpdateError, BaseMismatchError) as err:
            return err
        return None

    def _held(self) -> WeightBase:
        return held_base(self._loop.engine, self._boot_id)

    def _commit(
        self, tensors: dict[str, torch.Tensor], update: UpdateRequest, context
    ) -> tuple[int, WeightBase]:
        return commit_for_call(self._loop, self._ledger, update, tensors, context, self._boot_id)

    def _close_group(self) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.close()


def register_weight_sync(
    server: grpc.Server,
    loop: ExclusiveSubmitter,
    boot_id: str = "",
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
) -> WeightSyncServicer:
    """Adds the WeightSyncService to `server` (a `build_server` extra_servicers hook, which passes the
    server's boot id; list SERVICE_NAME in extra_service_names for reflection and health)."""
    servicer = WeightSyncServicer(loop, idle_timeout_s, boot_id)
    weights_pb2_grpc.add_WeightSyncServiceServicer_to_server(servicer, server)
    return servicer


def weight_sync_hook(
    idle_timeout_s: float,
) -> Callable[[grpc.Server, ExclusiveSubmitter, str], WeightSyncServicer]:
    """`register_weight_sync` with another idle timeout, as a `build_server` hook."""
    return lambda server, loop, boot_id: register_weight_sync(server, loop, boot_id, idle_timeout_s)


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
    if not context.is_active():  # a client that died or cancelled mid-stream: nobody reads a status
        raise CallerGoneError("the call ended mid-stream; nothing was written")
    if not staged.complete:  # the client closed its side early: a malformed update, not a cancel
        raise WeightUpdateError(
            f"stream ended after {staged.num_bytes_received} of {staged.manifest.nbytes} bytes; nothing written"
        )


def _model_device(engine: Any) -> torch.device:
    return next(engine.model.parameters()).device


_STATUS_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (WeightUpdateError, grpc.StatusCode.INVALID_ARGUMENT),
    (BaseMismatchError, grpc.StatusCode.FAILED_PRECONDITION),
    (CallerGoneError, grpc.StatusCode.CANCELLED),
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
