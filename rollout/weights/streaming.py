"""Cuts an update into bounded byte chunks for the gRPC stream, one tensor at a time.

The wire payload is the concatenation of every tensor's raw bytes in manifest order; chunks are
slices of it of at most `chunk_bytes`, so a tensor may span chunks and no message ever holds the
whole model. Only one tensor is copied to host memory at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import torch

DEFAULT_CHUNK_BYTES = 2 * 1024 * 1024  # under gRPC's default 4 MiB message limit with room to spare


def tensor_bytes(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's raw bytes as a flat uint8 array (a view when already on CPU and contiguous)."""
    host = tensor.detach().to("cpu").contiguous()
    return host.reshape(-1).view(torch.uint8).numpy()


def iter_byte_chunks(
    tensors: Iterable[torch.Tensor], chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[tuple[int, bytes]]:
    """Yields (offset, data) with len(data) <= chunk_bytes covering all tensors' bytes in order."""
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    pending: list[np.ndarray] = []
    pending_bytes, offset = 0, 0
    for tensor in tensors:
        data, position = tensor_bytes(tensor), 0
        while position < len(data):
            take = min(chunk_bytes - pending_bytes, len(data) - position)
            pending.append(data[position : position + take])
            pending_bytes, position = pending_bytes + take, position + take
            if pending_bytes == chunk_bytes:
                yield offset, _join(pending)
                offset, pending, pending_bytes = offset + pending_bytes, [], 0
    if pending_bytes:
        yield offset, _join(pending)


def _join(pieces: list[np.ndarray]) -> bytes:
    return pieces[0].tobytes() if len(pieces) == 1 else b"".join(piece.tobytes() for piece in pieces)
