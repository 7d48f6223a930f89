"""Host lists to device tensors without a stream sync.

A plain `torch.tensor(values, device="cuda")` copies from pageable memory, which makes the host
wait for the GPU's stream to drain. Staging through pinned memory with `non_blocking=True` queues the
copy behind the work already launched and returns at once; the caching host allocator keeps the
pinned buffer alive until the copy has run.
"""

from __future__ import annotations

import torch


def to_device(data: list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    host = torch.tensor(data, dtype=dtype)
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host


def copy_to(dst: torch.Tensor, data: list) -> None:
    """Writes `data` (shaped like `dst`) into an existing device tensor, e.g. a CUDA graph's input."""
    host = torch.tensor(data, dtype=dst.dtype)
    if dst.is_cuda:
        host = host.pin_memory()
    dst.copy_(host, non_blocking=dst.is_cuda)
