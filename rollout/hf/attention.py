"""The bridge from transformers' attention interface to the paged KV cache.

The engine registers `paged_attention_forward` under ATTN_IMPLEMENTATION and switches the model to
it, so unmodified Hugging Face model code runs over the paged cache: the model computes q/k/v (with
its own RoPE, norms and biases) and hands them here. The runner sets the step's `ForwardContext` in
a context variable around `model(...)` (`forward_context`), so models whose layers drop `**kwargs`
work too. No attention mask is built: the metadata says who attends to what.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from transformers import AttentionInterface

from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.attention_metadata import AttentionMetadata

ATTN_IMPLEMENTATION = "rollout_paged"


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


def in_forward_context() -> bool:
    """Whether the engine is running the model on this thread (inside `forward_context`)."""
    return _CURRENT.get() is not None


@dataclass(frozen=True, slots=True)
class AttentionCall:
    """What one attention call handed the engine, as seen by `probe_calls`."""

    layer_idx: int | None
    query_shape: tuple[int, ...]  # [1, num_heads, T, head_dim]
    key_shape: tuple[int, ...]
    value_shape: tuple[int, ...]
    kwargs: frozenset[str]  # keyword arguments that carried a value (not None)


_PROBE: ContextVar[list[AttentionCall] | None] = ContextVar("rollout_attention_probe", default=None)


@contextlib.contextmanager
def probe_calls() -> Iterator[list[AttentionCall]]:
    """Inside the block, attention calls are recorded (and answer zeros) instead of touching a cache."""
    calls: list[AttentionCall] = []
    token = _PROBE.set(calls)
    try:
        yield calls
    finally:
        _PROBE.reset(token)


def _record(
    calls: list[AttentionCall],
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kwargs: dict[str, object],
) -> torch.Tensor:
    given = frozenset(name for name, arg in kwargs.items() if arg is not None)
    layer_idx = getattr(module, "layer_idx", None)
    calls.append(AttentionCall(layer_idx, tuple(query.shape), tuple(key.shape), tuple(value.shape), given))
    batch, num_heads, tokens = query.shape[:3]
    return query.new_zeros(batch, tokens, num_heads, value.shape[-1])


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
    s_aux: torch.Tensor | None = None,  # gpt-oss attention sinks: one logit per query head
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    calls = _PROBE.get()
    if calls is not None:
        extra = {
            "sliding_window": sliding_window,
            "softcap": softcap,
            "s_aux": s_aux,
            "dropout": dropout or None,
        }
        extra.update(kwargs)
        return _record(calls, module, query, key, value, extra), None
    q = query[0].transpose(0, 1)  # [T, H, D]
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    out = paged_attention_tokens(module, q, k, v, scaling, sliding_window, softcap, s_aux)
    return out.unsqueeze(0), None  # [1, T, H, Dv], as transformers expects


def paged_attention_tokens(
    module: torch.nn.Module,
    q: torch.Tensor,  # [T, num_heads, head_dim], the packed batch's new tokens
    k: torch.Tensor,  # [T, num_kv_heads, head_dim]
    v: torch.Tensor,  # [T, num_kv_heads, v_head_dim]
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
) -> torch.Tensor:  # [T, num_heads, v_head_dim]
    """Writes the new K/V into the layer's paged cache and attends each sequence's new tokens."""
    rollout_context = _CURRENT.get()
    if rollout_context is None:
        raise RuntimeError(f"{ATTN_IMPLEMENTATION} attention runs only inside the rollout engine")
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:  # the cache holds one K/V row per token
        raise ValueError(
            f"layer {module.layer_idx}: the model hands attention {k.shape[0]} key/value rows for "
            f"{q.shape[0]} query tokens (rows it adds itself, such as compressed or memory entries); the "
            "engine caches exactly one key/value row per token"
        )
    key_cache, value_cache = rollout_context.kv_caches[module.layer_idx]
    v_head_dim = v.shape[-1]
    if v_head_dim < value_cache.shape[-1]:  # zero columns of V give zero output columns, sliced off below
        v = torch.nn.functional.pad(v, (0, value_cache.shape[-1] - v_head_dim))
    backend = rollout_context.backend
    backend.write_kv_cache(k, v, key_cache, value_cache, rollout_context.meta.slot_mapping)
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    features = _features(module, s_aux)  # only what the model uses reaches the backend
    out = backend.paged_attention(
        q, key_cache, value_cache, rollout_context.meta, scale, sliding_window, softcap, **features
    )
    return out[..., :v_head_dim]


def _features(module: torch.nn.Module, s_aux: torch.Tensor | None) -> dict[str, object]:
    """Keyword features of this layer's attention that the model expresses outside the call's arguments."""
    features: dict[str, object] = {} if s_aux is None else {"sinks": s_aux}
    chunk_size = chunked_attention_size(module)
    if chunk_size is not None:
        features["chunk_size"] = chunk_size
    return features


def chunked_attention_size(module: torch.nn.Module) -> int | None:
    """The chunk of a chunked-local-attention layer (Llama 4), else None.

    transformers expresses chunking only in the mask it builds per `config.layer_types` entry
    ("chunked_attention" layers get `attention_chunk_size`); the engine builds no mask, so it reads
    the same two config fields.
    """
    config = getattr(module, "config", None)
    layer_types = getattr(config, "layer_types", None)
    layer_idx = getattr(module, "layer_idx", None)
    if not layer_types or layer_idx is None or layer_idx >= len(layer_types):
        return None
    if layer_types[layer_idx] != "chunked_attention":
        return None
    return getattr(config, "attention_chunk_size", None)


def register() -> None:
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
