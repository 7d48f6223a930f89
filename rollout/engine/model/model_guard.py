"""The model guard: decides at load whether the engine can run a model exactly, and refuses by name if not.

Static checks on the model and one tiny probe forward (attention calls recorded, not computed) catch
what the engine does not implement: several attention calls per layer, attention arguments it would
ignore, chunked attention without a chunk size, layers that keep state between steps. The probe also yields the KV cache
shape each layer really produces. `self_check` then compares numbers against the model's own forward.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers import PreTrainedModel

from rollout.engine.hybrid.recurrent_layers import attention_layer_indices, is_within_supported
from rollout.engine.kv.kv_cache import KVCacheSpec, LayerKV
from rollout.hf import attention as hf_attention
from rollout.hf.attention import AttentionCall
from rollout.ops.attention_backend import AttentionBackend

# Attention keyword arguments the engine implements, and those that carry no attention semantics.
IMPLEMENTED_KWARGS = frozenset({"sliding_window", "softcap", "s_aux"})
NEUTRAL_KWARGS = frozenset(
    {"position_ids", "use_cache", "output_router_logits", "output_attentions", "cache_position", "is_causal"}
)
# Module class names of layers that carry state across steps (the engine keeps only KV).
_STATEFUL_NAMES = ("Mamba", "Mixer", "GatedDeltaNet", "ShortConv", "Recurrent", "Rwkv", "Lightning")
_STATE_CALLS = ("get_conv_state(", "get_recurrent_state(", "update_conv_state(", "update_recurrent_state(")
_PROBE_TOKENS = 4
# Stateful classes that cannot run per sequence with pooled states, and why (the refusal names it).
_KNOWN_CAUSES = {
    "RecurrentGemmaRecurrentBlock": "it keeps its convolution window and RG-LRU state as module attributes "
    "(conv1d_state, rg_lru.recurrent_states) for one batch at a time, not in a cache object the engine can "
    "keep per sequence, and its multi-token path restarts the convolution from zeros",
}


class UnsupportedModelError(ValueError):
    """The engine cannot run this model exactly; the message names the model type and the cause."""


def check_model(model: PreTrainedModel, backend: AttentionBackend | None = None) -> KVCacheSpec:
    """Refuses what the engine cannot run exactly; returns the KV cache shape of every layer."""
    text_config = model.config.get_text_config()
    name = f"{type(model).__name__} (model_type {text_config.model_type!r})"
    check_stateful_layers(model)
    _check_chunked_attention(text_config, name)
    calls = _probe(model, name)
    _check_calls(calls, attention_layer_indices(model), name)
    kv = {call.layer_idx: _layer_kv(call) for call in calls}
    # a recurrent layer keeps no KV: an empty pool keeps kv_caches indexed by layer
    layers = tuple(kv.get(i, LayerKV(0, 1, 1)) for i in range(text_config.num_hidden_layers))
    spec = KVCacheSpec(layers, model.dtype)
    return spec.with_equal_head_dims() if backend is not None and backend.equal_kv_head_dims else spec


def _probe(model: PreTrainedModel, name: str) -> list[AttentionCall]:
    """One eager forward over a few tokens with attention recorded, in the engine's attention mode."""
    device = next(model.parameters()).device
    input_ids = (
        torch.arange(1, _PROBE_TOKENS + 1, device=device)[None] % model.config.get_text_config().vocab_size
    )
    positions = torch.arange(_PROBE_TOKENS, device=device)[None]
    with hf_attention.probe_calls() as calls, torch.inference_mode():
        try:
            model(input_ids=input_ids, position_ids=positions, use_cache=False)
        except Exception as exc:  # any failure is a refusal naming it, not a crash of the load
            raise UnsupportedModelError(
                f"{name} fails in a forward without a dense attention mask ({type(exc).__name__}: {exc}); "
                "the engine cannot run it"
            ) from exc
    return sorted(calls, key=lambda c: -1 if c.layer_idx is None else c.layer_idx)


def _check_calls(calls: list[AttentionCall], layers: list[int], name: str) -> None:
    counts: dict[int | None, int] = {}
    for call in calls:
        counts[call.layer_idx] = counts.get(call.layer_idx, 0) + 1
    many = {layer: n for layer, n in counts.items() if n > 1}
    if many:
        layer, n = next(iter(many.items()))
        raise UnsupportedModelError(
            f"{name} calls attention {n} times in layer {layer} per forward; the engine keeps one KV per "
            "layer, so it cannot run this model exactly"
        )
    if sorted(counts, key=lambda x: -1 if x is None else x) != layers:
        raise UnsupportedModelError(
            f"{name}: expected one attention call per attention layer ({layers}), found layers "
            f"{sorted(counts, key=str)}; the engine cannot run this model exactly"
        )
    unknown = set().union(*(c.kwargs for c in calls)) - IMPLEMENTED_KWARGS - NEUTRAL_KWARGS
    if unknown:
        raise UnsupportedModelError(
            f"{name} passes attention arguments the engine does not implement: {sorted(unknown)}"
        )


def check_stateful_layers(model: PreTrainedModel) -> None:
    """Recurrent layers run per sequence with pooled states (recurrent_layers.py) when supported."""
    name = f"{type(model).__name__} (model_type {model.config.get_text_config().model_type!r})"
    for module_name, module in model.named_modules():
        if type(module).__name__ in _KNOWN_CAUSES:
            raise UnsupportedModelError(
                f"{name} has layers that keep state between steps ({module_name}: {type(module).__name__}): "
                f"{_KNOWN_CAUSES[type(module).__name__]}; the engine cannot run this model exactly"
            )
    for module_name, module in model.named_modules():
        cls = type(module).__name__
        if isinstance(module, PreTrainedModel):  # MambaForCausalLM, MambaModel: the layer inside is named
            continue
        if "Norm" in cls:  # MambaRMSNorm, Mamba2RMSNorm: position-wise, whatever family names them
            continue
        stateful = any(word in cls for word in _STATEFUL_NAMES) or _calls_cache_states(type(module))
        if stateful and not is_within_supported(model, module_name):
            raise UnsupportedModelError(
                f"{name} has layers that keep state between steps ({module_name}: {cls}); the engine keeps "
                "only the KV cache, so it cannot run this model exactly"
            )


@functools.cache
def _calls_cache_states(cls: type) -> bool:
    """A module whose own forward reads or writes the cache's conv / recurrent states keeps state between
    steps, whatever its name (ZayaCCAProjection has no stateful word; bf16's self-check bound missed it)."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):  # built-in or generated: no source to read
        return False
    return any(call in source for call in _STATE_CALLS)


def _check_chunked_attention(text_config: object, name: str) -> None:
    """Chunked local attention (Llama 4) is implemented from `layer_types` + `attention_chunk_size`."""
    layer_types = getattr(text_config, "layer_types", None) or ()
    chunk = getattr(text_config, "attention_chunk_size", None)
    if "chunked_attention" in layer_types and not (isinstance(chunk, int) and chunk >= 1):
        raise UnsupportedModelError(
            f"{name} has chunked-attention layers but attention_chunk_size is {chunk!r}; the engine "
            "cannot tell which keys they see"
        )


def _layer_kv(call: AttentionCall) -> LayerKV:
    _, num_kv_heads, _, k_head_dim = call.key_shape
    v_heads, v_head_dim = call.value_shape[1], call.value_shape[3]
    if v_heads != num_kv_heads:
        raise UnsupportedModelError(f"layer {call.layer_idx}: K has {num_kv_heads} heads but V has {v_heads}")
    return LayerKV(num_kv_heads, k_head_dim, v_head_dim)
