"""A two-rank weight update in which rank 1 fails to stage one tensor (run under torch.multiprocessing)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rollout.config import EngineConfig
from rollout.distributed import sharded_weights
from rollout.distributed.group import join
from rollout.distributed.sharding import load_shard
from rollout.weights.manifest import WeightUpdateError
from rollout.weights.shards import local_tensor

FAILING = "model.layers.1.mlp.down_proj.weight"


def update_with_a_failing_rank(rank: int, path: str, port: int, new: dict[str, torch.Tensor]) -> None:
    group = join(rank, 2, torch.device("cpu"), None, port)
    model = load_shard(Path(path), EngineConfig(tensor_parallel_size=2), group.device)
    before = {name: local_tensor(p).clone() for name, p in model.named_parameters()}
    if rank == 1:
        original = sharded_weights.local_shard

        def failing(target: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
            if target is dict(model.named_parameters())[FAILING]:
                raise RuntimeError("out of memory (injected)")
            return original(target, full)

        sharded_weights.local_shard = failing
        sharded_weights.receive_update(model, group.broadcast_object(), group)
    else:
        with pytest.raises(WeightUpdateError, match=f"rank 1: {FAILING}.*injected"):
            sharded_weights.update_all_ranks(model, new, group)
    for name, p in model.named_parameters():  # nothing written, on either rank
        assert torch.equal(local_tensor(p), before[name]), name
    # Both ranks leave together: gloo aborts a rank (std::terminate) whose peer tore its pairs down first.
    torch.distributed.barrier(group=group.cpu_group)
    group.close()
