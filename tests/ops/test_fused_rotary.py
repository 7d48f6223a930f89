"""The rotary table: inside the engine a rotary embedding returns, for any packed positions, what its
own forward returns; rope types that rescale with the length keep transformers' forward."""

from __future__ import annotations

import shutil

import pytest
import torch

from rollout.hf import attention as hf_attention
from rollout.hf import fused_modules, fused_rotary
from tests.builders import tiny_model

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

ROPE = {
    "default": None,
    "llama3": dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=64, rope_theta=10000.0,
    ),
    "yarn": dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64, rope_theta=10000.0),
}  # fmt: skip


def rotary_of(rope: dict | None) -> torch.nn.Module:
    model = tiny_model("llama", **({"rope_parameters": rope} if rope else {}))
    fused_modules.install(model)
    return model.model.rotary_emb


def in_engine(call):
    token = hf_attention._CURRENT.set(object())
    try:
        return call()
    finally:
        hf_attention._CURRENT.reset(token)


@pytest.mark.parametrize("rope", ROPE.values(), ids=ROPE.keys())
def test_the_table_gives_the_modules_own_cos_and_sin(rope: dict | None) -> None:
    """Bit for bit, at packed positions in any order, past the table's first size (it grows)."""
    rotary = rotary_of(rope)
    assert fused_rotary.is_rotary_embedding(rotary) and "forward" in rotary.__dict__
    x = torch.randn(1, 5, 64)
    positions = torch.tensor([[7, 0, 5000, 1024, 3, 2047, 2048, 1]])
    got = in_engine(lambda: rotary(x, position_ids=positions))
    want = type(rotary).forward(rotary, x, positions)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert rotary.__dict__["_rollout_rotary_table"][0].shape[0] == 8192


def test_a_dynamic_rope_keeps_transformers_forward() -> None:
    """Its frequencies change with the sequence length: no table could hold them."""
    model = tiny_model("llama", rope_parameters=dict(rope_type="dynamic", factor=2.0, rope_theta=10000.0))
    assert fused_modules.install(model)["rotary"] == 0
    assert "forward" not in model.model.rotary_emb.__dict__


def test_outside_the_engine_or_for_a_batch_the_module_runs_its_own_forward() -> None:
    """Neither call reads (or builds) the table."""
    rotary = rotary_of(None)
    del rotary.__dict__["_rollout_rotary_table"]  # the probe's
    x = torch.randn(1, 3, 64)
    rotary(x, torch.tensor([[4, 5, 6]]))  # outside the engine
    in_engine(lambda: rotary(x, torch.tensor([[1, 2], [3, 4]])))  # two rows: not the engine's layout
    assert "_rollout_rotary_table" not in rotary.__dict__


def test_edited_frequencies_rebuild_the_table() -> None:
    rotary = rotary_of(None)
    x, positions = torch.randn(1, 2, 64), torch.tensor([[9, 30]])
    in_engine(lambda: rotary(x, positions))
    with torch.no_grad():
        rotary.inv_freq.mul_(0.5)
    got = in_engine(lambda: rotary(x, positions))
    want = type(rotary).forward(rotary, x, positions)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_a_rotary_whose_output_reads_its_input_is_refused() -> None:
    """The table is built from an empty input: a forward that reads more of x than its dtype and device
    would give other values at serve time, and the probe (a real input) sees it."""
    rotary = tiny_model("llama").model.rotary_emb
    base = type(rotary)

    class ScaledRotaryEmbedding(base):
        def forward(self, x, position_ids):
            cos, sin = base.forward(self, x, position_ids)
            return cos * x.shape[-1], sin

    rotary.__class__ = ScaledRotaryEmbedding
    assert fused_rotary.is_rotary_embedding(rotary) and not fused_rotary.reproduces(rotary)
