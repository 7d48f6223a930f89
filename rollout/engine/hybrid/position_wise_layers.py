"""Position-wise layers: decoder layers with no token mixer at all (Nemotron-H's MLP-only and MoE-only
layers), which neither call attention nor keep recurrent state.

A layer counts only when each of its direct children is a norm or a block named in POSITION_WISE, so a
layer that holds anything else (an unknown token mixer) is still expected to call attention and is
refused by the guard. The load-time self-check (packed sequences, chunked prefill) proves the numbers:
a block listed here that mixed tokens would lose its context across chunks and be refused there.
"""

from __future__ import annotations

from torch import nn

# Blocks that act on each token alone (MLPs, routed experts with their shared experts).
POSITION_WISE = frozenset({"NemotronHMLP", "NemotronHMoE"})


def position_wise_layer_indices(model: nn.Module) -> frozenset[int]:
    """Indices of the decoder layers made only of norms and POSITION_WISE blocks."""
    layers = _decoder_layers(model)
    return frozenset(i for i, layer in enumerate(layers) if _is_position_wise(layer))


def _is_position_wise(layer: nn.Module) -> bool:
    kinds = [type(child).__name__ for child in layer.children()]
    return any(k in POSITION_WISE for k in kinds) and all(k in POSITION_WISE or "Norm" in k for k in kinds)


def _decoder_layers(model: nn.Module) -> nn.ModuleList | tuple[()]:
    """The model's list of decoder layers (as many as the config says), or none."""
    count = model.config.get_text_config().num_hidden_layers
    for name, module in model.named_modules():
        if name.endswith("layers") and isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    return ()
