"""The tiny models phase c checks, one per family the issue names, built from configs in code (no hub).

Small enough to build in a second, large enough (several heads, GQA, two or four layers) that a
wrong kernel shows in the logits. In order of need: the phase runs them until its time box ends.
"""

from __future__ import annotations

import torch
import transformers as tf
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel

_BASE = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

FAMILIES: dict[str, tuple[type, dict]] = {
    "llama": (tf.LlamaConfig, {}),
    "qwen3_next (hybrid)": (
        tf.Qwen3NextConfig,
        dict(
            num_hidden_layers=4,
            head_dim=32,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=32,
            linear_value_head_dim=32,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        ),
    ),
    "mixtral (MoE)": (
        tf.MixtralConfig,
        dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
    ),
    "gemma2": (tf.Gemma2Config, dict(head_dim=32, sliding_window=16)),
    "qwen3": (tf.Qwen3Config, dict(head_dim=32)),
    "qwen2": (tf.Qwen2Config, {}),
}
HYBRID = {"qwen3_next (hybrid)"}  # recurrent state: the engine captures no CUDA graph for it


def make_config(family: str) -> PretrainedConfig:
    cls, overrides = FAMILIES[family]
    return cls(**{**_BASE, **overrides})


def make_model(
    family: str, seed: int, device: str, dtype: torch.dtype, attn: str | None = None
) -> PreTrainedModel:
    """A fresh model of `family` with weights from `seed`; `attn` names transformers' attention implementation."""
    torch.manual_seed(seed)
    kwargs = {} if attn is None else {"attn_implementation": attn}
    model = AutoModelForCausalLM.from_config(make_config(family), **kwargs)
    return model.to(device=device, dtype=dtype).eval()
