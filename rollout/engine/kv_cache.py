"""KV cache geometry and allocation: how many blocks fit, and the per-layer block pools."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

from rollout.engine.host_to_device import to_device


@dataclass(frozen=True)
class KVCacheSpec:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @classmethod
    def from_model_config(cls, config: PretrainedConfig, dtype: torch.dtype) -> KVCacheSpec:
        config = config.get_text_config()
        num_heads = config.num_attention_heads
        num_kv_heads = getattr(config, "num_key_value_heads", None) or num_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
        return cls(config.num_hidden_layers, num_kv_heads, head_dim, dtype)

    def bytes_per_block(self, block_size: int) -> int:
        element = torch.empty((), dtype=self.dtype).element_size()
        return 2 * self.num_layers * block_size * self.num_kv_heads * self.head_dim * element


def allocate_kv_caches(
    spec: KVCacheSpec, num_blocks: int, block_size: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # One tensor for the whole cache so a block copy across all layers is a single op.
    pool = torch.zeros(
        spec.num_layers,
        2,
        num_blocks,
        block_size,
        spec.num_kv_heads,
        spec.head_dim,
        dtype=spec.dtype,
        device=device,
    )
    return [(pool[layer, 0], pool[layer, 1]) for layer in range(spec.num_layers)]


def copy_blocks(kv_caches: list[tuple[torch.Tensor, torch.Tensor]], copies: list[tuple[int, int]]) -> None:
    """Copy-on-write for forked samples: block src's K/V become block dst's, in every layer."""
    if not copies:
        return
    device = kv_caches[0][0].device
    src = to_device([c[0] for c in copies], torch.int64, device)
    dst = to_device([c[1] for c in copies], torch.int64, device)
    for key_cache, value_cache in kv_caches:
        key_cache[dst] = key_cache[src]
        value_cache[dst] = value_cache[src]
