"""The per-sequence wrapper over a packed batch, on Mamba-1 mixers: one-token rows of several sequences
go through the layer in one call and each row runs once; a chunk continuing a state still goes token by
token; every row equals its sequence's own calls."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from transformers import DynamicCache

from rollout.engine.hybrid import recurrent_layers
from rollout.engine.hybrid.recurrent_layers import Segment, step_segments
from tests.engine.mamba1_builders import MAMBA1, call, mamba1_mixers, mamba1_model, prefilled_slots, states

TOL = 1e-6  # fp32; batched rows differ from single ones only by the input projection's GEMM rounding
# rows of the packed batch: decode, fresh prompt (4), decode, continued chunk (3), decode
LAYOUT = [(0, 1), (1, 5), (5, 6), (6, 9), (9, 10)]


@pytest.mark.parametrize("model_type", MAMBA1)
def test_decode_rows_run_once_in_one_call_and_equal_per_sequence_calls(model_type: str) -> None:
    torch.manual_seed(0)
    model = mamba1_model(model_type)
    mixer = mamba1_mixers(model)[0]
    reference = copy.deepcopy(mixer)
    slots = prefilled_slots(model, mixer, [3, 5, 7, 2])
    slots.insert(1, DynamicCache(config=model.config.get_text_config()))  # the fresh prompt's
    expected_slots = copy.deepcopy(slots)
    calls = _count_calls(mixer)
    recurrent_layers.wrap_recurrent_layers(model)
    packed = torch.randn(1, LAYOUT[-1][1], model.config.get_text_config().hidden_size)

    with step_segments([Segment(a, b, s) for (a, b), s in zip(LAYOUT, slots, strict=True)]):
        got = call(mixer, packed, None)

    rows = [packed[:, a:b] for a, b in LAYOUT]
    expected = torch.cat(
        [_one_sequence(reference, r, s) for r, s in zip(rows, expected_slots, strict=True)], 1
    )
    torch.testing.assert_close(got, expected, atol=TOL, rtol=TOL)
    for want, have in zip(expected_slots, slots, strict=True):
        for a, b in zip(states(want, mixer.layer_idx), states(have, mixer.layer_idx), strict=True):
            torch.testing.assert_close(b, a, atol=TOL, rtol=TOL)
    assert calls == [3, 4, 1, 1, 1]  # the 3 decodes together, the prompt whole, the chunk token by token


def _count_calls(mixer: torch.nn.Module) -> list[int]:
    """Records the rows (batch x tokens) of each call the wrapper makes to the mixer's own forward."""
    calls, forward = [], mixer.forward

    @functools.wraps(forward)
    def counted(hidden_states: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        calls.append(hidden_states.shape[0] * hidden_states.shape[1])
        return forward(hidden_states, *args, **kwargs)

    mixer.forward = counted
    return calls


def _one_sequence(mixer: torch.nn.Module, rows: torch.Tensor, slot: DynamicCache) -> torch.Tensor:
    """A sequence alone: a fresh prompt whole, a continued one token by token (Mamba's scan starts at zero)."""
    if slot.get_conv_state(mixer.layer_idx) is None:
        return call(mixer, rows, slot)
    return torch.cat([call(mixer, rows[:, i : i + 1], slot) for i in range(rows.shape[1])], 1)
