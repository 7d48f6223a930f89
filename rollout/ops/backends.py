"""Picks the paged-attention implementation: Triton kernels on CUDA, the fused-SDPA path elsewhere.

"torch" names the reference (the oracle, slow); "sdpa" the CPU path built for speed.

Only the Triton backend can be captured in a CUDA graph: its grids come from host ints in the
metadata, while the reference builds index tensors from host lists and masks with boolean indexing.
"""

from __future__ import annotations

import importlib.util

import torch

from rollout.ops import paged_attention_ref, paged_attention_sdpa
from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.cpu_kernels import load_cpu_kernels


def get_backend(name: str, device: torch.device) -> AttentionBackend:
    """`name` is EngineConfig.attention_backend: "auto", "sdpa", "torch" or "triton"."""
    if name == "auto":
        name = "triton" if device.type == "cuda" and importlib.util.find_spec("triton") else "sdpa"
    if name == "torch":
        return AttentionBackend(paged_attention_ref.write_kv_cache, paged_attention_ref.paged_attention)
    if name == "sdpa":  # one instance per engine: it keeps the plan of the step it is in
        kernels = load_cpu_kernels() if device.type == "cpu" else None
        return AttentionBackend(
            paged_attention_sdpa.cache_writer(kernels), paged_attention_sdpa.SdpaPagedAttention(kernels)
        )
    if name == "triton":
        from rollout.ops import triton_attention

        return AttentionBackend(
            triton_attention.write_kv_cache,
            triton_attention.paged_attention,
            supports_cuda_graphs=True,
            equal_kv_head_dims=True,
        )
    raise ValueError(f"attention_backend must be auto, sdpa, torch or triton, got {name!r}")
