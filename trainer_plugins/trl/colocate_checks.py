"""What TRL's colocate mode takes from GRPOConfig and RolloutConfig, and what it refuses by name.

TRL's colocate mode runs one engine per training process on that process's device; its
`vllm_tensor_parallel_size` > 1 (an engine spread over a group of training processes) is not supported
here. The async mode generates the next round while the trainer trains, which one process cannot do with
an engine it shares its thread with: refused. Server settings (address, token, TLS, transport) mean
nothing without a server and are ignored, as TRL ignores its server settings in colocate mode.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rollout import EngineConfig

from .config import RolloutConfig


def is_colocate(args: Any) -> bool:
    return args is not None and bool(args.use_vllm) and args.vllm_mode == "colocate"


def check_colocate_settings(args: Any, config: RolloutConfig) -> None:
    """Raises naming the field; called before anything is built."""
    if args.vllm_tensor_parallel_size != 1:
        raise NotImplementedError(
            f"vllm_tensor_parallel_size={args.vllm_tensor_parallel_size} with vllm_mode='colocate': each "
            "training process runs its own engine on one device here; use 1, or vllm_mode='server' with "
            "`rollout serve --tensor-parallel-size N`"
        )
    if config.async_generation:
        raise ValueError(
            "RolloutConfig.async_generation with vllm_mode='colocate': the engine runs in the training process, "
            "which cannot generate the next round while it trains; use vllm_mode='server' for async rounds"
        )
    engine = config.engine
    if engine is not None and engine.tensor_parallel_size != 1:
        raise NotImplementedError(
            "RolloutConfig.engine.tensor_parallel_size must be 1 with vllm_mode='colocate'"
        )


def engine_config(args: Any, config: RolloutConfig, process_index: int) -> EngineConfig:
    """The process's engine settings: RolloutConfig.engine, or GRPOConfig's vllm_* fields; each process
    seeds its own engine (seed + process index, as TRL seeds its colocated vLLM instances)."""
    base = config.engine or EngineConfig(
        gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        max_model_len=args.vllm_max_model_length,
    )
    return dataclasses.replace(base, seed=base.seed + process_index)
