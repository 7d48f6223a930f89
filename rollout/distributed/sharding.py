"""Sharded loading through the model's own transformers tensor-parallel plan, and what it refuses.

`from_pretrained(..., distributed_config=DistributedConfig(tp_size=N))` applies the plan
(`config.base_model_tp_plan` plus the class's `_tp_plan`, e.g. the gathered `lm_head`): q/k/v and
the MLP's first projections column-wise, the output projections row-wise with an all-reduce. Every
rank then holds its own KV heads, so the engine's KV pool, measured from the tensors the layers
produce, is sized for them without being told. Weight updates slice with the same placements
(rollout/distributed/sharded_weights.py).
"""

from __future__ import annotations

import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM, DistributedConfig, PreTrainedModel

from rollout.config import EngineConfig
from rollout.engine.model.model_loader import resolve_device, resolve_dtype


def check_tensor_parallel(path: str | os.PathLike, config: EngineConfig) -> torch.device:
    """Refuses, before any process starts, what tensor parallelism cannot run; returns rank 0's device."""
    size = config.tensor_parallel_size
    text_config = AutoConfig.from_pretrained(path).get_text_config()
    name = f"model_type {text_config.model_type!r}"
    if not getattr(text_config, "base_model_tp_plan", None):
        raise ValueError(
            f"tensor_parallel_size is {size} but {name} has no tensor-parallel plan in transformers "
            "(config.base_model_tp_plan); serve it with tensor_parallel_size=1"
        )
    heads = text_config.num_attention_heads
    kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
    if heads % size or kv_heads % size:
        raise ValueError(
            f"tensor_parallel_size {size} must divide the attention heads ({heads}) and the KV heads "
            f"({kv_heads}) of {name}"
        )
    if config.self_check_updates:
        raise ValueError("self_check_updates is not supported with tensor_parallel_size > 1 yet")
    device = resolve_device(config)
    if device.type == "cuda":
        return _check_cuda(config)
    if torch.cuda.is_available():
        raise ValueError(
            "device is 'cpu' but CUDA is available: tensor_parallel_size > 1 shards over the machine's "
            "accelerator (transformers builds its device mesh there); use device 'cuda' or 'auto'"
        )
    return device


def _check_cuda(config: EngineConfig) -> torch.device:
    if not config.enforce_eager:
        raise ValueError(
            "enforce_eager must be True with tensor_parallel_size > 1: CUDA graphs under tensor "
            "parallelism are not supported yet"
        )
    if torch.cuda.device_count() < config.tensor_parallel_size:
        raise ValueError(
            f"tensor_parallel_size is {config.tensor_parallel_size} but only "
            f"{torch.cuda.device_count()} CUDA devices are visible"
        )
    return torch.device("cuda", 0)


def load_shard(path: str | os.PathLike, config: EngineConfig, device: torch.device) -> PreTrainedModel:
    """This rank's shard of the model at `path` (torch.distributed must be initialized)."""
    model_dtype = getattr(AutoConfig.from_pretrained(path), "dtype", None)
    if isinstance(model_dtype, str):
        model_dtype = getattr(torch, model_dtype, None)
    return AutoModelForCausalLM.from_pretrained(
        path,
        dtype=resolve_dtype(config, device, model_dtype),
        distributed_config=DistributedConfig(tp_size=config.tensor_parallel_size),
    )
