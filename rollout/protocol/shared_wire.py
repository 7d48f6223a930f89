"""Conversions between the shared transport's messages and `rollout.weights.shared` views.

Only plain fields cross the wire (segment names, IPC handles, strides): nothing is unpickled, so a
request can name memory but never run code in the server.
"""

from __future__ import annotations

from rollout.protocol.generated import weights_pb2
from rollout.weights.manifest import Manifest, TensorSpec
from rollout.weights.shared import CudaIpcHandle, SharedMemoryHandle, SharedView, host_boot_id, host_name


def views_to_proto(views: list[SharedView]) -> list[weights_pb2.SharedTensor]:
    return [_view_to_proto(view) for view in views]


def views_from_proto(tensors: list[weights_pb2.SharedTensor]) -> list[SharedView]:
    return [_view_from_proto(message) for message in tensors]


def manifest_of(views: list[SharedView]) -> Manifest:
    return Manifest(tuple(view.spec for view in views))


def this_host() -> weights_pb2.HostIdentity:
    return weights_pb2.HostIdentity(boot_id=host_boot_id(), hostname=host_name())


def _view_to_proto(view: SharedView) -> weights_pb2.SharedTensor:
    spec = weights_pb2.TensorSpec(name=view.spec.name, shape=view.spec.shape, dtype=view.spec.dtype)
    message = weights_pb2.SharedTensor(spec=spec, stride=view.stride, storage_offset=view.storage_offset)
    h = view.handle
    if isinstance(h, SharedMemoryHandle):
        message.cpu.CopyFrom(
            weights_pb2.SharedMemoryHandle(
                manager_handle=h.manager, storage_handle=h.name, storage_bytes=h.nbytes
            )
        )
    else:
        message.cuda.CopyFrom(
            weights_pb2.CudaIpcHandle(
                device=h.device,
                storage_handle=h.handle,
                storage_bytes=h.nbytes,
                storage_offset_bytes=h.offset_bytes,
                ref_counter_handle=h.ref_counter_handle,
                ref_counter_offset=h.ref_counter_offset,
                event_handle=h.event_handle,
                event_sync_required=h.event_sync_required,
            )
        )
    return message


def _view_from_proto(message: weights_pb2.SharedTensor) -> SharedView:
    spec = TensorSpec(message.spec.name, tuple(message.spec.shape), message.spec.dtype)
    kind = message.WhichOneof("handle")
    if kind == "cpu":
        c = message.cpu
        handle: SharedMemoryHandle | CudaIpcHandle = SharedMemoryHandle(
            c.manager_handle, c.storage_handle, c.storage_bytes
        )
    elif kind == "cuda":
        g = message.cuda
        handle = CudaIpcHandle(
            g.device,
            g.storage_handle,
            g.storage_bytes,
            g.storage_offset_bytes,
            g.ref_counter_handle,
            g.ref_counter_offset,
            g.event_handle,
            g.event_sync_required,
        )
    else:
        raise ValueError(f"tensors[{spec.name!r}].handle: neither cpu nor cuda is set")
    return SharedView(spec, tuple(message.stride), message.storage_offset, handle)
