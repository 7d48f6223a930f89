"""StateBudget: a hybrid model's recurrent states are paid for out of the KV cache's memory budget.

Every running sequence owns a slot of fixed-size states (a convolution window and an SSM or
linear-attention state per recurrent layer, state_pool.py) and prefix caching keeps copies of them
(state_snapshots.py). As vLLM does for its Mamba state cache, they come out of the same budget as the
KV blocks (kv_sizing.py): the max_num_seqs running slots first, then the snapshots, the blocks get the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache

from rollout.config import EngineConfig
from rollout.engine.hybrid.recurrent_layers import Segment, step_segments
from rollout.engine.hybrid.state_pool import StatePool
from rollout.engine.hybrid.state_snapshots import state_bytes
from rollout.engine.kv import kv_sizing
from rollout.hf.attention import probe_calls

# With max_state_snapshots unset, snapshots take at most this share of what the running slots leave.
SNAPSHOT_SHARE = 0.25


@dataclass(frozen=True)
class StateBudget:
    """The cache memory budget and the recurrent states' part of it (all zero for a model without any)."""

    budget: int  # bytes for KV blocks and recurrent states together
    bytes_per_seq: int  # one sequence's states (one slot, one snapshot)
    num_slots: int  # running sequences' slots: max_num_seqs
    num_snapshots: int  # the snapshot cap (0: no snapshots, no prefix hits for a hybrid model)

    @property
    def state_bytes(self) -> int:
        return (self.num_slots + self.num_snapshots) * self.bytes_per_seq

    @property
    def kv_bytes(self) -> int:
        """What is left for the KV blocks."""
        return self.budget - self.state_bytes


def state_budget(
    model: nn.Module, pool: StatePool | None, config: EngineConfig, device: torch.device
) -> StateBudget:
    """Measures one sequence's states (for a hybrid model, `pool`), then splits the budget; ValueError
    naming the field when the states alone do not fit."""
    per_seq = measure_state_bytes(model, pool) if pool is not None else 0
    budget = kv_sizing.kv_cache_bytes(config, device)  # after the probe: what it left cached is not free
    if pool is None:
        return StateBudget(budget, 0, 0, 0)
    return plan_state_budget(config, per_seq, budget)


def measure_state_bytes(model: nn.Module, pool: StatePool) -> int:
    """One sequence's state bytes, exactly: the states are fixed-size (a convolution window, an SSM or
    linear-attention state), so one token's are a long sequence's (tested against real slots)."""
    return state_bytes(probe_states(model, pool))


def probe_states(model: nn.Module, pool: StatePool) -> DynamicCache:
    """The states the model's own layers leave in an empty slot after one token, run as an engine step
    runs them (per-sequence segments) with attention recorded, not computed."""
    slot = pool.new_states()
    input_ids = torch.ones(1, 1, dtype=torch.long, device=next(model.parameters()).device)
    with step_segments([Segment(0, 1, slot)]), probe_calls(), torch.inference_mode():
        model(input_ids=input_ids, position_ids=torch.zeros_like(input_ids), use_cache=False)
    return slot


def plan_state_budget(config: EngineConfig, bytes_per_seq: int, budget: int) -> StateBudget:
    """The running slots, then the snapshots (max_state_snapshots, or a default from what is left)."""
    num_slots = config.max_num_seqs
    slots = num_slots * bytes_per_seq
    if slots > budget:
        raise ValueError(
            f"max_num_seqs {num_slots}: the running sequences' recurrent states take {num_slots} x "
            f"{_size(bytes_per_seq)} = {_size(slots)}, more than the cache memory budget of {_size(budget)}; "
            "lower max_num_seqs, or raise kv_cache_memory_gb (or gpu_memory_utilization on a GPU)"
        )
    left = budget - slots
    return StateBudget(budget, bytes_per_seq, num_slots, _snapshot_cap(config, bytes_per_seq, left))


def _snapshot_cap(config: EngineConfig, bytes_per_seq: int, left: int) -> int:
    if not config.enable_prefix_caching:
        return 0  # no prefix hits, no snapshots taken
    if config.max_state_snapshots is None:
        share = int(left * SNAPSHOT_SHARE)
        fits = share // bytes_per_seq if bytes_per_seq else config.max_num_seqs
        return min(config.max_num_seqs, fits)
    wanted = config.max_state_snapshots * bytes_per_seq
    if wanted > left:
        raise ValueError(
            f"max_state_snapshots {config.max_state_snapshots}: the snapshots take "
            f"{config.max_state_snapshots} x {_size(bytes_per_seq)} = {_size(wanted)}, more than the "
            f"{_size(left)} the cache memory budget leaves after the running sequences' states; lower "
            "max_state_snapshots (unset, it is derived from memory), or raise kv_cache_memory_gb "
            "(or gpu_memory_utilization on a GPU)"
        )
    return config.max_state_snapshots


def _size(num_bytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.2f} {unit}"
    return f"{num_bytes} B"
