"""The bridge from transformers' attention interface to the paged KV cache.

The engine registers `paged_attention_forward` under ATTN_IMPLEMENTATION and switches the model to
it, so unmodified Hugging Face model code runs over the paged cache: the model computes q/k/v (with
its own RoPE, norms and biases) and hands them here. The runner sets the step's `ForwardContext` in
a context variable around `model(...)` (`forward_context`), so models whose layers drop `**kwargs`
work too. No attention mask is built: the metadata says who attends to what.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from transformers import AttentionInterface

from rollout.ops.attention_metadata import AttentionMetadata

ATTN_IMPLEMENTATION = "rollout_paged"


@dataclass(slots=True)
class AttentionBackend:
    write_kv_cache: Callable[..., None]
    paged_attention: Callable[..., torch.Tensor]
    # Safe inside a CUDA graph capture: no host syncs, and no launch shapes taken from tensor values.
    supports_cuda_graphs: bool = False


@dataclass(slots=True)
class ForwardContext:
    """Everything one forward pass needs to read and write the paged cache."""

    kv_caches: list[tuple[torch.Tensor, torch.Tensor]]  # per layer: [num_blocks, block_size, Hkv, D] each
    meta: AttentionMetadata
    backend: AttentionBackend


_CURRENT: ContextVar[ForwardContext | None] = ContextVar("rollout_forward_context", default=None)


@contextlib.contextmanager
def forward_context(context: ForwardContext) -> Iterator[None]:
    """Makes `context` the one every paged-attention call reads until the block exits."""
    token = _CURRENT.set(context)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def paged_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,  # [1, num_heads, T, head_dim]
    key: torch.Tensor,  # [1, num_kv_heads, T, head_dim]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    rollout_context = _CURRENT.get()
    if rollout_context is None:
        raise RuntimeError(f"{ATTN_IMPLEMENTATION} attention runs only inside the rollout engine")
    key_cache, value_cache = rollout_context.kv_caches[module.layer_idx]
    q = query[0].transpose(0, 1)  # [T, H, D]
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    backend = rollout_context.backend
    backend.write_kv_cache(k, v, key_cache, value_cache, rollout_context.meta.slot_mapping)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    out = backend.paged_attention(
        q, key_cache, value_cache, rollout_context.meta, scale, sliding_window, softcap
    )
    return out.unsqueeze(0), None  # [1, T, H, D], as transformers expects


def register() -> None:
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
