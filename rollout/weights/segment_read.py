"""Reads a trainer's shared-memory segment into the server's private memory with pread, never through a mapping.

A same-host trainer can truncate its segment at any moment. A copy from a mapping of it then touches
pages past the end of the file and the kernel kills the server with SIGBUS (nothing logged, nothing
to catch). A read(2) past the end is only short: the update is refused and nothing was written. So
the server reads each view's bytes when the push arrives, and the commit copies from its own memory.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rollout.weights.manifest import WeightUpdateError

READ_BYTES = 1 << 30  # per pread call: Linux returns at most ~2 GiB per call anyway
# torch's file_system segments (RefcountedMapAllocator) start with a reference count, padded to the
# map allocator's alignment (c10's gAlignment); the storage's bytes follow it.
REFCOUNT_HEADER_BYTES = 64


def read_segment_view(
    path: Path,
    segment_nbytes: int,
    name: str,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    stride: tuple[int, ...],
    storage_offset: int,
) -> torch.Tensor:
    """The view (`shape`, `stride`, `storage_offset` elements) of the segment at `path`, copied into a
    private tensor. FileNotFoundError if the segment is gone; WeightUpdateError naming `name` if it
    is smaller than `segment_nbytes` (plus torch's header) or shrinks while it is read."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    if 0 in shape:
        return torch.empty(shape, dtype=dtype)
    last = storage_offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    start, end = storage_offset * itemsize, (last + 1) * itemsize
    need = REFCOUNT_HEADER_BYTES + segment_nbytes
    buffer = torch.empty(end - start, dtype=torch.uint8)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        size = os.fstat(fd).st_size
        if size < need:  # mapping it would have grown the trainer's segment; reading it would come up short
            raise WeightUpdateError(f"{name}: segment {path.name} has {size} bytes, the handle says {need}")
        _read_exactly(fd, memoryview(buffer.numpy()), REFCOUNT_HEADER_BYTES + start, name, path)
    finally:
        os.close(fd)
    return buffer.view(dtype).as_strided(shape, stride, 0)


def _read_exactly(fd: int, into: memoryview, offset: int, name: str, path: Path) -> None:
    done = 0
    while done < len(into):
        count = os.preadv(fd, [into[done : done + READ_BYTES]], offset + done)
        if count == 0:
            raise WeightUpdateError(
                f"{name}: segment {path.name} ended at byte {offset + done} while it was read "
                f"(the trainer truncated or freed it); nothing was written"
            )
        done += count
