"""Workspace: scratch tensors reused from step to step.

On the CPU a fresh multi-MB tensor is fresh pages from the OS (glibc returns large blocks on free), and
faulting them in every step costs more than the arithmetic written into them. Hot per-step code asks
a workspace for its destinations instead; each name keeps the largest buffer asked for so far.
"""

from __future__ import annotations

import math

import torch


class Workspace:
    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}

    def get(
        self, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """An uninitialized tensor of `shape`, the same memory each time `name` is asked for."""
        numel = math.prod(shape)
        key = (name, dtype, device)
        buffer = self._buffers.get(key)
        if buffer is None or buffer.numel() < numel:
            buffer = self._buffers[key] = torch.empty(numel, dtype=dtype, device=device)
        return buffer[:numel].view(shape)
