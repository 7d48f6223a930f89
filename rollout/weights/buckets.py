"""Packed buckets for the broadcast transport: many small tensors travel as one flat buffer.

One collective per tensor costs a launch and a synchronization each (hundreds per model); packing
tensors of one dtype into buffers of up to `bucket_bytes` makes it a handful. Both sides derive the
same plan from the manifest alone, so only the manifest crosses the RPC.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rollout.weights.manifest import Manifest, torch_dtype

DEFAULT_BUCKET_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Bucket:
    """Manifest indices packed, in order, into one flat buffer of `dtype` with `numel` elements."""

    dtype: str
    indices: tuple[int, ...]
    numel: int


def plan_buckets(manifest: Manifest, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[Bucket]:
    """Groups tensors by dtype, in manifest order, closing a bucket when the next tensor would overflow it."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    buckets: list[Bucket] = []
    open_buckets: dict[str, tuple[list[int], int, int]] = {}  # dtype -> (indices, numel, nbytes)
    for index, spec in enumerate(manifest.tensors):
        indices, numel, nbytes = open_buckets.get(spec.dtype, ([], 0, 0))
        if indices and nbytes + spec.nbytes > bucket_bytes:
            buckets.append(Bucket(spec.dtype, tuple(indices), numel))
            indices, numel, nbytes = [], 0, 0
        open_buckets[spec.dtype] = (indices + [index], numel + spec.numel, nbytes + spec.nbytes)
    buckets += [Bucket(dtype, tuple(ix), numel) for dtype, (ix, numel, _) in open_buckets.items()]
    return buckets


def pack(bucket: Bucket, tensors: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor:
    """One flat buffer on `device` holding the bucket's tensors (indexed like the manifest) back to back."""
    return torch.cat([tensors[index].detach().reshape(-1).to(device) for index in bucket.indices])


def unpack(bucket: Bucket, flat: torch.Tensor, manifest: Manifest) -> Iterator[tuple[int, torch.Tensor]]:
    """(manifest index, flat view into `flat`) for each tensor of the bucket."""
    position = 0
    for index in bucket.indices:
        numel = manifest.tensors[index].numel
        yield index, flat[position : position + numel]
        position += numel


def empty_bucket(bucket: Bucket, device: torch.device) -> torch.Tensor:
    return torch.empty(bucket.numel, dtype=torch_dtype(bucket.dtype), device=device)


def receive_buckets(group: Any, manifest: Manifest, bucket_bytes: int) -> dict[str, torch.Tensor]:
    """Receiver side: every bucket broadcast over `group` (a rollout.weights.group.WeightGroup), in
    plan order; the returned tensors are views into the received buffers (no copy)."""
    tensors: dict[str, torch.Tensor] = {}
    for bucket in plan_buckets(manifest, bucket_bytes):
        flat = empty_bucket(bucket, group.device)
        group.broadcast(flat)
        for index, view in unpack(bucket, flat, manifest):
            spec = manifest.tensors[index]
            tensors[spec.name] = view.view(spec.shape)
    return tensors
