"""Builders for the Mamba-1 mixer tests (Mamba, Falcon-Mamba, Jamba): a zoo model's mixers and slots
holding the states a prefill of each given length left."""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, PreTrainedModel

from rollout.engine.hybrid import recurrent_layers
from tests.models.zoo import HYBRID, build

MAMBA1 = ("mamba", "falcon_mamba", "jamba")


def mamba1_model(model_type: str) -> PreTrainedModel:
    return build(next(f for f in HYBRID if f.model_type == model_type))


def mamba1_mixers(model: PreTrainedModel) -> list[nn.Module]:
    return [m for m in model.modules() if type(m).__name__ in recurrent_layers._STEPWISE]


def call(mixer: nn.Module, hidden_states: torch.Tensor, cache: object) -> torch.Tensor:
    """The mixer's own forward (wrapped or not) with `cache` under the name its forward takes."""
    with torch.no_grad():
        return mixer(hidden_states, **{recurrent_layers._arg_names(mixer)[0]: cache})


def prefilled_slots(model: PreTrainedModel, mixer: nn.Module, lengths: list[int]) -> list[DynamicCache]:
    """One slot per length, each holding `mixer`'s states after a prefill of that many random tokens."""
    config = model.config.get_text_config()
    slots = [DynamicCache(config=config) for _ in lengths]
    for slot, length in zip(slots, lengths, strict=True):
        call(mixer, torch.randn(1, length, config.hidden_size), slot)
    return slots


def states(slot: DynamicCache, layer_idx: int) -> list[torch.Tensor]:
    layer = slot.layers[layer_idx]
    return [layer.conv_states[0], layer.recurrent_states[0]]
