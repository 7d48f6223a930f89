"""Exact positions for models that derive them from a transformers cache instead of `position_ids`.

Llama 4's NoPE layers scale their queries by a function of each token's position (attention
temperature tuning), and compute that position as `arange(T) + past_key_values.get_seq_length()`.
The engine keeps no transformers cache and packs many sequences, prefill chunks and decodes into one
row, so that sum would be the token's index in the packed batch. Such models get a stand-in cache
whose "seen length" is the per-token offset `position_ids - arange(T)`: the model's own sum is then
each token's true position, in integers, bit for bit. Every other model's inputs stay as they were.
"""

from __future__ import annotations

import inspect

import torch
from transformers import PreTrainedModel


class PackedPositions:
    """Answers the two cache calls such a model makes: the seen length, and a pass-through update."""

    def __init__(self, position_ids: torch.Tensor):  # [1, T]
        self.position_ids = position_ids

    def get_seq_length(self, layer_idx: int = 0) -> torch.Tensor:  # [T]: position minus packed index
        positions = self.position_ids[0]
        return positions - torch.arange(positions.shape[0], device=positions.device)

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        *args: object,
        **kwargs: object,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The paged cache is written by the attention bridge; nothing is kept here."""
        return key_states, value_states


def derives_positions(model: PreTrainedModel) -> str | None:
    """The forward keyword that takes the stand-in cache when a layer computes positions from the cache
    length (Llama 4 temperature tuning), else None: `cache` (transformers >= 5.24), or `past_key_values`."""
    derived = any(
        getattr(module, "attn_temperature_tuning", False) and not getattr(module, "use_rope", True)
        for module in model.modules()
    )
    if not derived:
        return None
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def position_inputs(keyword: str | None, position_ids: torch.Tensor) -> dict[str, object]:
    """The extra forward keywords for a model (`keyword`: `derives_positions(model)`, computed once)."""
    return {keyword: PackedPositions(position_ids)} if keyword else {}
