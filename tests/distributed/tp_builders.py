"""Builders for the tensor-parallel tests: tiny models saved to disk (each rank loads its own shard)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, Qwen3MoeConfig, Qwen3MoeForCausalLM

from rollout import LLM, EngineConfig
from tests.builders import VOCAB, tiny_model

FAMILIES = ("llama", "qwen3", "qwen3_moe")


def tiny_moe(seed: int = 0) -> PreTrainedModel:
    torch.manual_seed(seed)
    config = Qwen3MoeConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = Qwen3MoeForCausalLM(config).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def saved_model(directory: Path, family: str, seed: int = 0) -> Path:
    """A tiny `family` model saved under `directory` (safetensors + config)."""
    model = tiny_moe(seed) if family == "qwen3_moe" else tiny_model(family, seed)
    model.save_pretrained(directory)
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
