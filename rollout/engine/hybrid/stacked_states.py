"""StackedStates: the states of several decoding sequences of one recurrent layer, as one batch.

Calling a recurrent layer once per sequence costs a Python call and a dozen small ops per sequence
per layer per step; most rows of a GRPO step are decodes (one token each). Those rows go through the
layer in one call: their states are stacked on the batch dimension, the layer's own one-token path
updates the stack (in place, or through the two update calls below, with transformers' rules), and
each row's part is copied back to its sequence's slot. Every row's arithmetic is its own.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


class StackedStates:
    """Answers the cache calls a layer's one-token path makes, for layer `layer_idx` of many slots."""

    def __init__(self, slots: list[DynamicCache], layer_idx: int) -> None:
        self.slots, self.layer_idx = slots, layer_idx
        layers = [slot.layers[layer_idx] for slot in slots]
        # transformers keeps each kind of state by state index: {state_idx: tensor or None}
        self.conv = {i: _stack([layer.conv_states[i] for layer in layers]) for i in layers[0].conv_states}
        self.recurrent = {
            i: _stack([layer.recurrent_states[i] for layer in layers]) for i in layers[0].recurrent_states
        }

    def get_conv_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        return self.conv[state_idx]

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> torch.Tensor | None:
        return self.recurrent[state_idx]

    def is_recording_past(self, layer_idx: int) -> bool:
        return False

    def update_conv_state(
        self, conv_states: torch.Tensor, layer_idx: int, state_idx: int = 0, **kwargs: object
    ):
        """transformers' rule with a previous state: keep the last kernel-size columns, return all."""
        state = self.conv[state_idx]
        full = torch.cat([state, conv_states], dim=-1)
        state.copy_(full[..., -state.shape[-1] :])
        return full

    def update_recurrent_state(
        self, recurrent_states: torch.Tensor, layer_idx: int, state_idx: int = 0, **kwargs
    ):
        return self.recurrent[state_idx].copy_(recurrent_states)

    def scatter(self) -> None:
        """Each sequence's slot takes its row of the updated stack, as a view (no copy): the next step's
        stack is a fresh tensor (torch.cat), so no row is ever written through another's view."""
        for row, slot in enumerate(self.slots):
            layer = slot.layers[self.layer_idx]
            for stacks, owns in ((self.conv, layer.conv_states), (self.recurrent, layer.recurrent_states)):
                for i, stacked in stacks.items():
                    if stacked is not None:
                        owns[i] = stacked[row : row + 1]


def _stack(states: list[torch.Tensor | None]) -> torch.Tensor | None:
    if states[0] is None:
        return None
    return torch.cat(states, dim=0)


def own_storage(slot: DynamicCache) -> None:
    """Replaces every state of `slot` that is a row view of a step's stack by its own copy (one row), so
    that copying the slot (a fork) does not copy whole stacks."""
    for layer in slot.layers:
        for states in (getattr(layer, "conv_states", None), getattr(layer, "recurrent_states", None)):
            for i, state in (states or {}).items():
                if state is not None and state._base is not None:
                    states[i] = state.clone()
