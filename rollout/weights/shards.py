"""This process's part of a parameter that tensor parallelism sharded (a DTensor), and of a full tensor.

Trainers push full tensors; a tensor-parallel rank holds a slice of each sharded parameter, cut by
the placements the model's transformers plan gave it. A value computed on one rank from its own
shard (a merged LoRA weight) travels as a DTensor wrapping that shard (`sharded_like`), so code that
takes full tensors takes it too. All functions are local (no collective), so any one rank can call
them: for unsharded parameters they are the identity.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor, distribute_tensor


def local_tensor(target: torch.Tensor) -> torch.Tensor:
    """The storage this rank holds for `target`."""
    return target.to_local() if isinstance(target, DTensor) else target.data


def local_shard(target: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """This rank's slice of `full`, cut exactly as the plan cut the parameter `target`.

    A DTensor `full` is already cut (`sharded_like`): its local part is the slice."""
    if isinstance(full, DTensor):
        assert isinstance(target, DTensor) and full.placements == target.placements, "cut another way"
        return full.to_local()
    if isinstance(target, DTensor):
        return distribute_tensor(full, target.device_mesh, target.placements, src_data_rank=None).to_local()
    return full


def sharded_like(target: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """This rank's slice `local` of a new value for `target`, as a tensor of `target`'s full shape."""
    if isinstance(target, DTensor):
        return DTensor.from_local(
            local, target.device_mesh, target.placements, shape=target.shape, stride=target.stride()
        )
    return local
