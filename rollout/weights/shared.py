"""The shared transport's memory: a trainer's tensors shared in place, mapped by a server on the same machine.

CPU storages move (once, then stay) into named shared memory, as torch.multiprocessing's
"file_system" strategy does; CUDA storages are shared as IPC handles by torch.multiprocessing's
reductions. The server reads a CPU segment into its own memory when the push arrives (pread, never a
mapping: a trainer that truncates its segment must not be able to crash the server, segment_read.py)
and maps a CUDA handle; the commit copies from there into its parameters. No byte crosses a socket.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.multiprocessing import reductions

from rollout.weights.manifest import TensorSpec, WeightUpdateError, torch_dtype
from rollout.weights.segment_read import read_segment_view

_SHM_DIR = Path("/dev/shm")
_SHM_PREFIX = "/torch_"


class SharedHandleError(RuntimeError):
    """A shared handle could not be opened (another machine's memory, a freed segment); nothing was written."""


@dataclass(frozen=True, slots=True)
class SharedMemoryHandle:
    """A CPU storage in named shared memory (UntypedStorage._share_filename_cpu_)."""

    manager: bytes
    name: bytes
    nbytes: int


@dataclass(frozen=True, slots=True)
class CudaIpcHandle:
    """A CUDA storage as reductions.reduce_tensor shares it (the fields rebuild_cuda_tensor takes)."""

    device: int
    handle: bytes
    nbytes: int
    offset_bytes: int
    ref_counter_handle: bytes
    ref_counter_offset: int
    event_handle: bytes
    event_sync_required: bool


@dataclass(frozen=True, slots=True)
class SharedView:
    """One tensor of an update: its manifest entry and its view into a shared storage."""

    spec: TensorSpec
    stride: tuple[int, ...]
    storage_offset: int
    handle: SharedMemoryHandle | CudaIpcHandle


def host_boot_id() -> str:
    """This machine's boot id (Linux), or "" where there is none: two processes share memory only if equal."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def host_name() -> str:
    return socket.gethostname()


# ---- trainer side -------------------------------------------------------------------------------


def share_tensors(named: list[tuple[str, torch.Tensor]]) -> list[SharedView]:
    """Shares every tensor's storage in place (CPU: moved once into shared memory, where it stays)."""
    return [share_tensor(name, tensor) for name, tensor in named]


def share_tensor(name: str, tensor: torch.Tensor) -> SharedView:
    tensor = tensor.detach()
    spec = TensorSpec.of(name, tensor)
    if tensor.device.type == "cuda":
        return SharedView(spec, tuple(tensor.stride()), tensor.storage_offset(), _cuda_handle(tensor))
    if tensor.device.type != "cpu":
        raise ValueError(f"{name}: the shared transport takes CPU or CUDA tensors, got {tensor.device}")
    manager, segment, nbytes = tensor.untyped_storage()._share_filename_cpu_()
    handle = SharedMemoryHandle(manager, segment, nbytes)
    return SharedView(spec, tuple(tensor.stride()), tensor.storage_offset(), handle)


def _cuda_handle(tensor: torch.Tensor) -> CudaIpcHandle:
    _, args = reductions.reduce_tensor(tensor)  # rebuild_cuda_tensor's arguments, in its order
    device, handle, nbytes, offset_bytes = args[6:10]
    counter, counter_offset, event, event_sync = args[11:15]
    return CudaIpcHandle(
        device, handle or b"", nbytes, offset_bytes, counter or b"", counter_offset, event or b"", event_sync
    )


# ---- server side --------------------------------------------------------------------------------


def open_view(view: SharedView) -> torch.Tensor:
    """The tensor of `view`: a CPU segment's bytes read into private memory now, a CUDA handle mapped;
    raises before reading anything a view does not cover."""
    dtype = torch_dtype(view.spec.dtype)
    _check_view(view, torch.empty((), dtype=dtype).element_size())
    if isinstance(view.handle, CudaIpcHandle):
        return _open_cuda(view, dtype)
    return _read_shared_memory(view, dtype)


def _check_view(view: SharedView, itemsize: int) -> None:
    """The view must lie inside its storage: a view past it would read memory the trainer did not share."""
    name, shape = view.spec.name, view.spec.shape
    if len(view.stride) != len(shape) or any(s < 0 for s in view.stride) or view.storage_offset < 0:
        raise WeightUpdateError(
            f"{name}: stride {view.stride} / offset {view.storage_offset} do not fit {shape}"
        )
    if math.prod(shape) == 0:
        return
    last = view.storage_offset + sum((n - 1) * s for n, s in zip(shape, view.stride, strict=True))
    if (last + 1) * itemsize > view.handle.nbytes:
        raise WeightUpdateError(
            f"{name}: the view reaches byte {(last + 1) * itemsize}, its storage has {view.handle.nbytes}"
        )


def _read_shared_memory(view: SharedView, dtype: torch.dtype) -> torch.Tensor:
    name, handle = view.spec.name, view.handle
    assert isinstance(handle, SharedMemoryHandle)
    segment = handle.name.decode(errors="replace")
    if not segment.startswith(_SHM_PREFIX) or "/" in segment[1:]:
        raise WeightUpdateError(f"{name}: {segment!r} is not a torch shared-memory segment")
    if not _SHM_DIR.is_dir():  # no /dev/shm (macOS): there a segment's size is fixed once it is set
        return _map_shared_memory(view, dtype).clone()
    try:
        return read_segment_view(
            _SHM_DIR / segment[1:],
            handle.nbytes,
            name,
            dtype,
            view.spec.shape,
            view.stride,
            view.storage_offset,
        )
    except FileNotFoundError:
        raise SharedHandleError(f"{name}: no shared-memory segment {segment} on this machine") from None


def _map_shared_memory(view: SharedView, dtype: torch.dtype) -> torch.Tensor:
    handle = view.handle
    assert isinstance(handle, SharedMemoryHandle)
    try:
        storage = torch.UntypedStorage._new_shared_filename_cpu(handle.manager, handle.name, handle.nbytes)
    except RuntimeError as err:
        raise SharedHandleError(f"{view.spec.name}: {err}") from err
    return torch.empty(0, dtype=dtype).set_(storage, view.storage_offset, view.spec.shape, view.stride)


def _open_cuda(view: SharedView, dtype: torch.dtype) -> torch.Tensor:
    h = view.handle
    assert isinstance(h, CudaIpcHandle)
    if not torch.cuda.is_available():
        raise SharedHandleError(f"{view.spec.name}: a CUDA IPC handle, but this server has no CUDA device")
    try:
        return reductions.rebuild_cuda_tensor(
            torch.Tensor,
            torch.Size(view.spec.shape),
            view.stride,
            view.storage_offset,
            torch.storage.TypedStorage,
            dtype,
            h.device,
            h.handle or None,
            h.nbytes,
            h.offset_bytes,
            False,
            h.ref_counter_handle,
            h.ref_counter_offset,
            h.event_handle,
            h.event_sync_required,
        )
    except RuntimeError as err:
        raise SharedHandleError(f"{view.spec.name}: {err}") from err
