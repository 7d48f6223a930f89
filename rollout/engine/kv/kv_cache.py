"""KV cache geometry and allocation: how many blocks fit, and the per-layer block pools."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollout.ops.host_to_device import to_device


@dataclass(frozen=True)
class LayerKV:
    """The K and V one layer's attention produces per token (V may be narrower, as in MLA)."""

    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class KVCacheSpec:
    """Per-layer K/V shapes, measured from the tensors the layers produce (see model_guard)."""

    layers: tuple[LayerKV, ...]
    dtype: torch.dtype

    def with_equal_head_dims(self) -> KVCacheSpec:
        """V pools as wide as K's, for backends that read both with one head size."""
        widest = tuple(
            LayerKV(x.num_kv_heads, x.k_head_dim, max(x.k_head_dim, x.v_head_dim)) for x in self.layers
        )
        return KVCacheSpec(widest, self.dtype)

    def bytes_per_block(self, block_size: int) -> int:
        element = torch.empty((), dtype=self.dtype).element_size()
        per_token = sum(layer.num_kv_heads * (layer.k_head_dim + layer.v_head_dim) for layer in self.layers)
        return block_size * per_token * element


def allocate_kv_caches(
    spec: KVCacheSpec, num_blocks: int, block_size: int, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer a zeroed K pool [num_blocks, block_size, Hkv, Dk] and V pool [..., Hkv, Dv]."""

    def pool(heads: int, head_dim: int) -> torch.Tensor:
        return torch.zeros(num_blocks, block_size, heads, head_dim, dtype=spec.dtype, device=device)

    return [
        (pool(layer.num_kv_heads, layer.k_head_dim), pool(layer.num_kv_heads, layer.v_head_dim))
        for layer in spec.layers
    ]


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
