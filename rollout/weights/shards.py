"""This process's part of a parameter that tensor parallelism sharded (a DTensor), and of a full tensor.

Trainers push full tensors; a tensor-parallel rank holds a slice of each sharded parameter, cut by
the placements the model's transformers plan gave it. Both functions are local (no collective), so
any one rank can call them: for unsharded parameters they are the identity.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, distribute_tensor


def local_tensor(target: torch.Tensor) -> torch.Tensor:
    """The storage this rank holds for `target`."""
    return target.to_local() if isinstance(target, DTensor) else target.data


def local_shard(target: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """This rank's slice of `full`, cut exactly as the plan cut the parameter `target`."""
    if isinstance(target, DTensor):
        return distribute_tensor(full, target.device_mesh, target.placements, src_data_rank=None).to_local()
    return full
