"""Builders for the tensor-parallel tests: tiny models saved to disk (each rank loads its own shard)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rollout import LLM, EngineConfig
from tests.builders import tiny_model

FAMILIES = ("llama", "qwen3", "qwen3_moe")


def saved_model(directory: Path, family: str, seed: int = 0) -> Path:
    """A tiny `family` model saved under `directory` (safetensors + config)."""
    tiny_model(family, seed).save_pretrained(directory)
    return directory


def perturbed_state(path: Path, seed: int = 1) -> dict[str, torch.Tensor]:
    """Every weight of the model at `path` moved by seeded noise: a trainer's next version."""
    model = AutoModelForCausalLM.from_pretrained(path)
    g = torch.Generator().manual_seed(seed)
    return {
        name: tensor.detach() + 0.05 * torch.randn(tensor.shape, generator=g)
        for name, tensor in model.state_dict().items()
    }


def tp_llm(path: Path, size: int = 2, **config: object) -> LLM:
    config.setdefault("num_blocks", 128)
    return LLM(path, config=EngineConfig(tensor_parallel_size=size, **config))


def one_llm(path: Path, **config: object) -> LLM:
    config.setdefault("num_blocks", 128)
    return LLM(path, config=EngineConfig(**config))
