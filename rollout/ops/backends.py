"""Picks the paged-attention implementation: Triton kernels on CUDA, the torch reference elsewhere.

Only the Triton backend can be captured in a CUDA graph: its grids come from host ints in the
metadata, while the reference builds index tensors from host lists and masks with boolean indexing.
"""

from __future__ import annotations

import importlib.util

import torch

from rollout.ops import paged_attention_ref
from rollout.ops.hf_attention import AttentionBackend


def get_backend(name: str, device: torch.device) -> AttentionBackend:
    """`name` is EngineConfig.attention_backend: "auto", "torch" or "triton"."""
    if name == "auto":
        name = "triton" if device.type == "cuda" and importlib.util.find_spec("triton") else "torch"
    if name == "torch":
        return AttentionBackend(paged_attention_ref.write_kv_cache, paged_attention_ref.paged_attention)
    if name == "triton":
        from rollout.ops import triton_attention

        return AttentionBackend(
            triton_attention.write_kv_cache,
            triton_attention.paged_attention,
            supports_cuda_graphs=True,
            equal_kv_head_dims=True,
        )
    raise ValueError(f"attention_backend must be auto, torch or triton, got {name!r}")
