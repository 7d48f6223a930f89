"""Two-rank weight updates in which rank 1 fails to stage one tensor, or to merge one module's LoRA
adapter (run under torch.multiprocessing): nothing is written, on either rank."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from rollout.config import EngineConfig
from rollout.distributed import sharded_weights
from rollout.distributed.group import TPGroup, join
from rollout.distributed.sharding import load_shard
from rollout.weights import adapter_store
from rollout.weights.adapter_store import AdapterStore
from rollout.weights.lora import LoraTargets
from rollout.weights.manifest import NamedTensors, WeightUpdateError
from rollout.weights.shards import local_tensor

FAILING = "model.layers.1.mlp.down_proj.weight"
FAILING_MODULE = FAILING.removesuffix(".weight")


def update_with_a_failing_rank(rank: int, path: str, port: int, new: dict[str, torch.Tensor]) -> None:
    """Rank 1 fails to cut its slice of FAILING (a full tensor)."""
    _update(rank, path, port, new, None, sharded_weights, f"rank 1: {FAILING}.*injected")


def adapter_update_with_a_failing_rank(
    rank: int, path: str, port: int, new: NamedTensors, lora: LoraTargets
) -> None:
    """Rank 1 fails to cut its slice of FAILING_MODULE's merged adapter."""
    _update(rank, path, port, new, lora, adapter_store, f"rank 1: .*injected.*{FAILING_MODULE}")


def _update(
    rank: int,
    path: str,
    port: int,
    new: NamedTensors,
    lora: LoraTargets | None,
    faulty: ModuleType,
    error: str,
) -> None:
    group = join(rank, 2, torch.device("cpu"), None, port)
    model = load_shard(Path(path), EngineConfig(tensor_parallel_size=2), group.device)
    store = AdapterStore()
    before = {name: local_tensor(p).clone() for name, p in model.named_parameters()}
    if rank == 1:
        faulty.local_shard = _failing(faulty.local_shard, dict(model.named_parameters())[FAILING])
        sharded_weights.receive_update(model, group.broadcast_object(), group, store)
    else:
        with pytest.raises(WeightUpdateError, match=error):
            sharded_weights.update_all_ranks(model, store.plan(model, new, lora), group)
    for name, p in model.named_parameters():  # nothing written, on either rank
        assert torch.equal(local_tensor(p), before[name]), name
    assert store.adapted == []  # no base kept either
    _leave(group)


def _failing(local_shard: Callable, failing: torch.Tensor) -> Callable:
    def cut(target: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
        if target is failing:
            raise RuntimeError("out of memory (injected)")
        return local_shard(target, full)

    return cut


def _leave(group: TPGroup) -> None:
    # Both ranks leave together: gloo aborts a rank (std::terminate) whose peer tore its pairs down first.
    torch.distributed.barrier(group=group.cpu_group)
    group.close()
