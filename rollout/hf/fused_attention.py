"""The CPU fast path for Llama-family attention modules: the rotary embedding in one kernel and the
paged cache called on the packed tokens directly.

transformers' attention forward turns the projections into [1, heads, T, D] views, rotates queries
and keys with ten eager ops (`rotate_half`: two slices, a negation, a concatenation; products and
sums) and hands the attention interface tensors the engine transposes back; on a CPU decode step
that costs a tenth as much as the model's matmuls. This forward keeps the projections (and Qwen3's
query/key norms) as the module's own calls, rotates in one pass (csrc/fused_cpu.cpp, the same
rounding as the torch ops) and calls the paged attention on [T, heads, D]. A module gets it only when
it reproduces the module's own forward on a probe batch through a private paged cache.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rollout.hf import attention as hf_attention
from rollout.hf.fused_checks import engaged, reproduced
from rollout.ops.attention_metadata import AttentionMetadata
from rollout.ops.backends import get_backend
from rollout.ops.cpu_kernels import load_cpu_kernels

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
_QK_NORMS = ("q_norm", "k_norm")
# keyword arguments a decoder layer hands its attention that this forward may ignore: the engine's
# attention ignores them too (the mask: the metadata says who attends to what)
_IGNORED = frozenset({"attention_mask", "position_ids", "use_cache", "cache_position"})
_PROBE_TOKENS = 5
_PROBE_BLOCK = 4

# The attention classes whose forward this one restates (read in transformers 5.24), by where each
# takes its sliding window from: a feature a short random probe cannot see is named here, not probed.
_SLIDING_WINDOW: dict[str, Callable[[torch.nn.Module], int | None]] = {
    "LlamaAttention": lambda module: None,
    "MistralAttention": lambda module: getattr(module.config, "sliding_window", None),
    "Qwen2Attention": lambda module: module.sliding_window,
    "Qwen3Attention": lambda module: module.sliding_window,
    "Qwen3MoeAttention": lambda module: module.sliding_window,
}


def is_llama_attention(module: torch.nn.Module) -> bool:
    """One of the classes above, as transformers defines it: four linear projections, optionally
    per-head query/key norms, and the attributes the forward reads; the probe checks the rest."""
    children = set(module._modules)
    return (
        type(module).__name__ in _SLIDING_WINDOW
        and type(module).__module__.startswith("transformers.models.")
        and children in (set(_PROJECTIONS), set(_PROJECTIONS) | set(_QK_NORMS))
        and all(isinstance(getattr(module, name), torch.nn.Linear) for name in _PROJECTIONS)
        and isinstance(getattr(module, "head_dim", None), int)
        and isinstance(getattr(module, "layer_idx", None), int)
        and isinstance(getattr(module, "scaling", None), float)
        and not module._parameters
    )


def fused_attention_forward(
    self: torch.nn.Module,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    *args,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    if args or not _serves(self, hidden_states, position_embeddings, kwargs):
        return type(self).forward(self, hidden_states, position_embeddings, *args, **kwargs)
    return attention(self, hidden_states, position_embeddings), None


def _serves(
    module: torch.nn.Module,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None,
    kwargs: dict[str, object],
) -> bool:
    """Inside the engine, fp32 CPU, one packed row, no transformers cache, no keyword it would use."""
    return (
        engaged(hidden_states, module.q_proj.weight)
        and position_embeddings is not None
        and hidden_states.dim() == 3
        and hidden_states.shape[0] == 1
        and all(
            key in _IGNORED or (key in ("cache", "past_key_values") and value is None)
            for key, value in kwargs.items()
        )
    )


def attention(
    module: torch.nn.Module,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:  # [1, T, hidden]
    """The module's projections, one-pass rotary, the paged attention on [T, heads, D], the output projection."""
    tokens, head_dim = hidden_states.shape[1], module.head_dim
    q = module.q_proj(hidden_states).view(tokens, -1, head_dim)  # [T, H, D]
    k = module.k_proj(hidden_states).view(tokens, -1, head_dim)  # [T, Hkv, D]
    v = module.v_proj(hidden_states).view(tokens, -1, head_dim)
    if "q_norm" in module._modules:
        q, k = module.q_norm(q), module.k_norm(k)
    cos, sin = (t.reshape(tokens, -1).contiguous() for t in position_embeddings)  # [T, D]
    kernels = load_cpu_kernels()
    q, k = kernels.rotary(q, cos, sin), kernels.rotary(k, cos, sin)
    window = _SLIDING_WINDOW[type(module).__name__](module)
    out = hf_attention.paged_attention_tokens(module, q, k, v, module.scaling, window)
    return module.o_proj(out.reshape(1, tokens, -1))


@torch.inference_mode()
def reproduces(module: torch.nn.Module) -> bool:
    """This forward against the module's own on a few tokens through a private paged cache (sdpa backend)."""
    weight = module.q_proj.weight
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        return False
    generator = torch.Generator().manual_seed(0)
    hidden = module.q_proj.in_features
    x = torch.randn(1, _PROBE_TOKENS, hidden, generator=generator) * 3
    rotary = tuple(torch.randn(1, _PROBE_TOKENS, module.head_dim, generator=generator) for _ in range(2))
    results = []
    for forward in (_own_forward, attention):
        context = hf_attention.ForwardContext(
            _probe_caches(module), _probe_metadata(), get_backend("sdpa", torch.device("cpu"))
        )
        try:
            with hf_attention.forward_context(context):
                results.append(forward(module, x, rotary))
        except (RuntimeError, TypeError, ValueError):  # another signature or layout: not this kind
            return False
    want, got = results
    return reproduced(got, want)


def _own_forward(
    module: torch.nn.Module, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    return type(module).forward(module, x, position_embeddings=rotary, attention_mask=None)[0]


def _probe_caches(module: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer index up to the module's maps to one small zeroed K/V pool."""
    kv_heads = module.k_proj.out_features // module.head_dim
    shape = (2, _PROBE_BLOCK, kv_heads, module.head_dim)
    caches = (torch.zeros(shape), torch.zeros(shape))
    return [caches] * (module.layer_idx + 1)


def _probe_metadata() -> AttentionMetadata:
    """One sequence prefilling its first `_PROBE_TOKENS` tokens into blocks 0 and 1."""
    n = _PROBE_TOKENS
    return AttentionMetadata(
        slot_mapping=torch.arange(n),
        cu_seqlens_q=torch.tensor([0, n], dtype=torch.int32),
        seq_lens=torch.tensor([n], dtype=torch.int32),
        block_tables=torch.tensor([[0, 1]], dtype=torch.int32),
        max_query_len=n,
        max_seq_len=n,
        query_lens_cpu=[n],
        seq_lens_cpu=[n],
    )
