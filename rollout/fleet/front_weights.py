"""WeightSyncService on the fleet's gRPC front: one push, to every replica, through the fleet-atomic path.

The front receives an update as a single server does (manifest, then chunks; or a checkpoint path),
checks what it can alone (in-flight policy, the adapter's base), then hands it to push_to_fleet: staged
on every replica, committed on all or none, so an error means no replica changed. The fleet is the
server the client sees: its base is (fleet id, the ledger's base version), which an adapter push names
and every response returns. torch.distributed pushes are group_fanout.py's; shared memory needs the
trainer on the replica's host, which the front cannot promise: UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import ray

from rollout.fleet.fleet_payload import FleetPayload
from rollout.fleet.fleet_update import FleetUpdateError, push_to_fleet
from rollout.fleet.group_fanout import close_group, init_group, update_from_group
from rollout.fleet.replica_errors import bounded
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.weights_wire import base_to_proto, manifest_from_proto
from rollout.server.update_commit import CallerGoneError, UpdateRequest
from rollout.server.weights_servicer import _first_header, _receive_chunks
from rollout.weights.manifest import WeightUpdateError
from rollout.weights.updater import StagedWeights
from rollout.weights.weight_base import BaseMismatchError, WeightBase, check_base, relies_on_held_base

FLEET_POLICIES = ("wait", "abort")


class FrontWeights(weights_pb2_grpc.WeightSyncServiceServicer):
    def __init__(self, front: Any) -> None:
        self.front = front
        self._lock = threading.Lock()  # one update at a time, as on one server
        self._committed: dict[str, int] = {}  # update id -> the version it set (a retry is answered)

    def UpdateWeights(self, request_iterator, context):
        with _status(context), self._lock:
            header = _first_header(request_iterator)
            manifest = manifest_from_proto(header.manifest)
            update = UpdateRequest(header.options)
            version = self._committed.get(update.update_id) if update.update_id else None
            if version is None:
                policy = _fleet_policy(update)
                check_base(
                    update.base,
                    self.held(),
                    relies_on_held_base((t.name for t in manifest.tensors), update.lora),
                )
                staged = StagedWeights(manifest)
                _receive_chunks(request_iterator, staged, context)
                payload = FleetPayload(ref=ray.put(staged.named_tensors()), lora=update.lora)
                version = self._push(payload, update, policy)
        return weights_pb2.UpdateWeightsResponse(
            weight_version=version,
            num_tensors=len(manifest),
            num_bytes=manifest.nbytes,
            base=base_to_proto(self.held()),
        )

    def UpdateWeightsFromDisk(self, request, context):
        """Each replica reads `path` itself (a filesystem they share; fleet_payload.py)."""
        with _status(context), self._lock:
            update = UpdateRequest(request.options)
            version = self._committed.get(update.update_id) if update.update_id else None
            if version is None:
                policy = _fleet_policy(update)
                check_base(update.base, self.held(), bool(update.lora) and update.base is not None)
                version = self._push(FleetPayload(path=request.path, lora=update.lora), update, policy)
        return weights_pb2.UpdateWeightsFromDiskResponse(
            weight_version=version, base=base_to_proto(self.held())
        )

    def UpdateWeightsFromShared(self, request, context):
        context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "UpdateWeightsFromShared through the fleet's gRPC front: shared memory needs the trainer on "
            "each replica's host; push over gRPC, disk or torch.distributed instead",
        )

    def InitWeightGroup(self, request, context):
        return _run(init_group(self.front, request, context))

    def UpdateWeightsFromGroup(self, request, context):
        return _run(update_from_group(self.front, request, context))

    def CloseWeightGroup(self, request, context):
        return _run(close_group(self.front, request, context))

    def held(self) -> WeightBase:
        """The base every replica holds, as the fleet names it."""
        return WeightBase(self.front.fleet_id, ray.get(self.front.ledger.base.remote()))

    def _push(self, payload: FleetPayload, update: UpdateRequest, policy: str) -> int:
        front = self.front
        version = push_to_fleet(front.handle, front.replicas, front.ledger, payload, update.version, policy)
        if update.update_id:
            self._committed[update.update_id] = version
        return version


def _fleet_policy(update: UpdateRequest) -> str:
    policy = "abort" if update.options.abort_running else update.in_flight
    if policy not in FLEET_POLICIES:
        raise ValueError(f"in_flight: a fleet update commits with one of {FLEET_POLICIES}, got {policy!r}")
    return policy


def _run(coroutine: Any) -> Any:
    """group_fanout's coroutines on this RPC thread (the front's server is a threaded one)."""
    return asyncio.run(coroutine)


_REFUSALS = (
    ("BaseMismatchError", grpc.StatusCode.FAILED_PRECONDITION),
    ("WeightUpdateError", grpc.StatusCode.INVALID_ARGUMENT),
    ("ValueError", grpc.StatusCode.INVALID_ARGUMENT),
    ("FileNotFoundError", grpc.StatusCode.NOT_FOUND),
)


@contextmanager
def _status(context: grpc.ServicerContext) -> Iterator[None]:
    """Maps a failed update to a gRPC status; a fleet failure by what the replicas said."""
    try:
        yield
    except FleetUpdateError as err:
        text = str(err)
        code = next((c for name, c in _REFUSALS if name in text), grpc.StatusCode.UNAVAILABLE)
        if "while committing" in text:  # past the point of no return: say what each replica serves
            code, text = grpc.StatusCode.INTERNAL, f"{text}; replicas now serve {err.versions}"
        context.abort(code, bounded(f"FleetUpdateError: {text}"))
    except (WeightUpdateError, ValueError) as err:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, bounded(f"{type(err).__name__}: {err}"))
    except BaseMismatchError as err:
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, bounded(f"BaseMismatchError: {err}"))
    except CallerGoneError as err:
        context.abort(grpc.StatusCode.CANCELLED, str(err))
