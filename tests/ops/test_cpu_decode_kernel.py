"""The compiled CPU decode kernel: it builds wherever a C++ compiler is found, reads the paged cache
exactly as the reference does (GQA, windows, chunks, narrower V, empty rows), and can be switched off."""

from __future__ import annotations

import shutil

import pytest
import torch

from rollout.ops import cpu_decode_kernel
from rollout.ops import paged_attention_ref as ref
from rollout.ops.cpu_decode_kernel import DecodeRows, decode_attention, load_decode_kernel

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@needs_compiler
def test_the_kernel_builds_where_a_compiler_is_found() -> None:
    assert load_decode_kernel() is not None


def test_the_environment_switch_turns_it_off(monkeypatch) -> None:
    monkeypatch.setenv(cpu_decode_kernel.DISABLE_ENV, "0")
    assert load_decode_kernel.__wrapped__() is None


@needs_compiler
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(8, 2), (4, 4), (6, 1)])
@pytest.mark.parametrize(
    "masking", [{}, dict(sliding_window=6), dict(chunk_size=8), dict(sliding_window=3, chunk_size=8)], ids=str
)
def test_decode_rows_equal_the_reference(
    paged_batch, num_heads: int, num_kv_heads: int, masking: dict
) -> None:
    batch = paged_batch([1, 9, 16, 33, 70], [1] * 5, num_heads, num_kv_heads, head_dim=32, seed=num_heads)
    args = (batch.query, batch.key_cache, batch.value_cache)
    plan = DecodeRows(None, batch.meta.block_tables, batch.meta.seq_lens.long())
    masks = (masking.get("sliding_window"), masking.get("chunk_size"))
    out = decode_attention(load_decode_kernel(), *args, plan, 0.3, masks)
    torch.testing.assert_close(
        out, ref.paged_attention(*args, batch.meta, 0.3, **masking), atol=1e-5, rtol=1e-5
    )


@needs_compiler
def test_a_narrower_value_head_and_empty_rows(paged_batch) -> None:
    """MLA's V is narrower than K (the engine pads V's cache); a length-0 row attends to nothing."""
    batch = paged_batch([12, 30, 5], [1, 1, 1], head_dim=16, seed=2)
    value_cache = batch.value_cache[..., :8].contiguous()
    plan = DecodeRows(None, batch.meta.block_tables, torch.tensor([12, 0, 5]))
    out = decode_attention(
        load_decode_kernel(), batch.query, batch.key_cache, value_cache, plan, 0.25, (None, None)
    )
    expected = ref.paged_attention(batch.query, batch.key_cache, value_cache, batch.meta, 0.25)
    torch.testing.assert_close(out[[0, 2]], expected[[0, 2]], atol=1e-5, rtol=1e-5)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
