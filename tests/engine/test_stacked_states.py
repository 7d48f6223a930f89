"""StackedStates answers a Mamba-1 mixer's one-token path for many slots: one batched call leaves each
row's output and states as a call per sequence does."""

from __future__ import annotations

import copy

import pytest
import torch

from rollout.engine.hybrid.stacked_states import StackedStates
from tests.engine.mamba1_builders import MAMBA1, call, mamba1_mixers, mamba1_model, prefilled_slots, states

# fp32; the only difference is the rounding of the input projection's GEMM over 4 rows instead of 1
TOL = 1e-6


def assert_rounding_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Within TOL of the largest value, at least 1 (the zoo's Jamba holds unit-gain states of up to ~4)."""
    torch.testing.assert_close(got, want, atol=TOL * max(1.0, want.abs().max().item()), rtol=TOL)


@pytest.mark.parametrize("model_type", MAMBA1)
def test_a_batched_one_token_call_equals_one_call_per_sequence(model_type: str) -> None:
    torch.manual_seed(0)
    model = mamba1_model(model_type)
    for mixer in mamba1_mixers(model):
        slots = prefilled_slots(model, mixer, [3, 5, 9, 2])
        stacked_slots = copy.deepcopy(slots)
        tokens = torch.randn(len(slots), 1, model.config.get_text_config().hidden_size)
        one_by_one = torch.cat([call(mixer, tokens[i : i + 1], slot) for i, slot in enumerate(slots)])
        stacked = StackedStates(stacked_slots, mixer.layer_idx)
        batched = call(mixer, tokens, stacked)
        stacked.scatter()
        assert_rounding_close(batched, one_by_one)
        for alone, together in zip(slots, stacked_slots, strict=True):
            for want, got in zip(
                states(alone, mixer.layer_idx), states(together, mixer.layer_idx), strict=True
            ):
                assert_rounding_close(got, want)
