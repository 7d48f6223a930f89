"""Attention modules told their layer at call time (Zamba2's shared transformer block) get it at load.

Zamba2 reuses one transformer block (tied weights) at several depths: each depth holds its own
attention module, built with layer_idx -1, and passes the layer as a forward argument, the index
transformers keeps that layer's KV under. The engine's paged attention reads `module.layer_idx`, so
each such module takes the index of the decoder layer that holds it, and every call checks that the
model passes that same index (a module called at two depths would keep two KVs in one: refused).
"""

from __future__ import annotations

import functools
import inspect

from torch import nn


def index_shared_attention(model: nn.Module) -> int:
    """Gives every attention module that takes its layer as an argument its decoder layer's index; returns
    how many there are."""
    layers = _decoder_layers(model)
    count = 0
    for i, layer in enumerate(layers or ()):
        for module in layer.modules():
            if _takes_layer_at_call(module) and not getattr(module, "_rollout_layer_checked", False):
                module.layer_idx = i
                module.forward = _checked(module.forward, module)
                module._rollout_layer_checked = True
                count += 1
    return count


def _decoder_layers(model: nn.Module) -> nn.ModuleList | None:
    return next(
        (m for name, m in model.named_modules() if name.endswith("layers") and isinstance(m, nn.ModuleList)),
        None,
    )


def _takes_layer_at_call(module: nn.Module) -> bool:
    if not getattr(module, "is_causal", False) or getattr(module, "layer_idx", 0) not in (None, -1):
        return False
    return "layer_idx" in inspect.signature(module.forward).parameters


def _checked(forward, module: nn.Module):
    signature = inspect.signature(forward)

    @functools.wraps(forward)
    def run(*args: object, **kwargs: object) -> object:
        given = signature.bind(*args, **kwargs).arguments.get("layer_idx")
        if given != module.layer_idx:
            raise ValueError(
                f"{type(module).__name__} of layer {module.layer_idx} was called as layer {given}; the engine "
                "keeps one KV per attention module"
            )
        return forward(*args, **kwargs)

    return run
