"""AttentionBackend: the two calls every paged-attention implementation provides, and what it supports.

It lives in ops/ (not in the transformers bridge) so the kernels and their dispatch never import
transformers; the bridge and the engine only hold one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(slots=True)
class AttentionBackend:
    """paged_attention(query, key_cache, value_cache, meta, scale, sliding_window, softcap, *, sinks, chunk_size).

    Model features beyond the positional ones arrive as keywords only when the model uses them
    (`sinks`: gpt-oss's per-head logits; `chunk_size`: Llama 4's chunked local attention); the
    value cache may be narrower than the key cache (MLA) unless `equal_kv_head_dims` is set.
    """

    write_kv_cache: Callable[..., None]
    paged_attention: Callable[..., torch.Tensor]
    # Safe inside a CUDA graph capture: no host syncs, and no launch shapes taken from tensor values.
    supports_cuda_graphs: bool = False
    # Reads K and V with one head size: a narrower V (MLA) is cached zero-padded to K's width.
    equal_kv_head_dims: bool = False
