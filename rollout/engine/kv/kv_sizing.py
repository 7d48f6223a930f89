"""How long a sequence may be and how many KV blocks the engine allocates, from config, model and device.

Blocks are sized to what can be used (max_num_seqs sequences of max_model_len tokens) within a
memory budget: `kv_cache_memory_gb` when set, else the free GPU memory left by
`gpu_memory_utilization`, else 1 GiB on CPU, less a hybrid model's recurrent states
(hybrid/state_budget.py); never fewer than one full-length sequence needs.
"""

from __future__ import annotations

import logging

import torch
from transformers import PreTrainedModel

from rollout.config import EngineConfig
from rollout.engine.kv.kv_cache import KVCacheSpec
from rollout.engine.model import model_loader

logger = logging.getLogger(__name__)
CPU_KV_CACHE_GB = 1.0


def max_model_len(model: PreTrainedModel, config: EngineConfig) -> int:
    """The configured context length, or the model's; ValueError if it exceeds the model's."""
    limit = model_loader.model_max_len(model)
    wanted = config.max_model_len or limit
    if wanted is None:
        raise ValueError("cannot tell the model's context length; set EngineConfig.max_model_len")
    if limit is not None and wanted > limit:
        raise ValueError(f"max_model_len {wanted} exceeds the model's context length {limit}")
    return wanted


def num_blocks(config: EngineConfig, max_len: int, spec: KVCacheSpec, budget: int) -> int:
    """`config.num_blocks`, or as many as `budget` bytes hold and can be used (logged: a server's start)."""
    blocks = _num_blocks(config, max_len, spec, budget)
    size = blocks * spec.bytes_per_block(config.block_size) / 2**30
    logger.info(
        "KV cache: %d blocks of %d tokens (%.2f GiB; max_model_len %d)",
        blocks,
        config.block_size,
        size,
        max_len,
    )
    return blocks


def _num_blocks(config: EngineConfig, max_len: int, spec: KVCacheSpec, budget: int) -> int:
    block_size = config.block_size
    per_seq = -(-max_len // block_size)
    if config.num_blocks is not None:
        if config.num_blocks < per_seq:
            raise ValueError(
                f"num_blocks {config.num_blocks} cannot hold one sequence of max_model_len "
                f"{max_len} ({per_seq} blocks of {block_size})"
            )
        return config.num_blocks
    useful = per_seq * config.max_num_seqs
    per_block = spec.bytes_per_block(block_size)
    if per_block == 0:  # no attention layer (Mamba-2): blocks only count positions, they hold no KV
        return useful
    return max(per_seq, min(useful, budget // per_block))


def kv_cache_bytes(config: EngineConfig, device: torch.device) -> int:
    if config.kv_cache_memory_gb is not None:
        return int(config.kv_cache_memory_gb * 2**30)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        # memory torch's caching allocator holds but no tensor uses is free to the KV cache too (a
        # colocated trainer that freed its model before building an engine would otherwise lose it)
        free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        reserve = total * (1 - config.gpu_memory_utilization)
        return int(max(0, free - reserve) * 0.9)  # headroom for activations
    return int(CPU_KV_CACHE_GB * 2**30)
