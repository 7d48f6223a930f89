"""The torch paged-attention reference against dense attention: the oracle of the kernels has its own oracle."""

from __future__ import annotations

import pytest
import torch

from rollout.ops import paged_attention_ref as ref

# (seq_lens, query_lens): context positions per sequence after this step, new tokens per sequence
DECODE_MIXED_CONTEXTS = ([1, 5, 37, 70], [1, 1, 1, 1])
PREFILL_WITH_CONTEXT = ([9, 20, 13], [3, 20, 8])
MIXED = ([17, 6, 30, 2], [1, 6, 5, 1])
CASES = {"decode": DECODE_MIXED_CONTEXTS, "prefill": PREFILL_WITH_CONTEXT, "mixed": MIXED}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("tile_blocks", [2, ref.DEFAULT_TILE_BLOCKS])
def test_reference_matches_dense_attention(paged_batch, dense_oracle, case: str, tile_blocks: int) -> None:
    batch = paged_batch(*CASES[case], seed=list(CASES).index(case) * 100 + tile_blocks)
    out = ref.paged_attention(
        batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25, tile_blocks=tile_blocks
    )
    torch.testing.assert_close(out, dense_oracle(batch, 0.25), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 1), (4, 2), (2, 2)])
def test_reference_handles_grouped_query_heads(
    paged_batch, dense_oracle, num_heads: int, num_kv_heads: int
) -> None:
    batch = paged_batch(*MIXED, num_heads=num_heads, num_kv_heads=num_kv_heads, seed=num_kv_heads)
    out = ref.paged_attention(batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
    torch.testing.assert_close(out, dense_oracle(batch, 0.25), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_reference_sliding_window_drops_old_positions(paged_batch, dense_oracle, case: str) -> None:
    batch = paged_batch(*CASES[case], seed=7)
    out = ref.paged_attention(
        batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25, sliding_window=5
    )
    torch.testing.assert_close(out, dense_oracle(batch, 0.25, sliding_window=5), atol=1e-5, rtol=1e-5)
    full = ref.paged_attention(batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
    assert not torch.allclose(out, full)  # the window actually bites in these cases


@pytest.mark.parametrize("case", CASES)
def test_reference_softcap_bounds_scores(paged_batch, dense_oracle, case: str) -> None:
    batch = paged_batch(*CASES[case], seed=11)
    out = ref.paged_attention(batch.query, batch.key_cache, batch.value_cache, batch.meta, 1.0, softcap=2.0)
    torch.testing.assert_close(out, dense_oracle(batch, 1.0, softcap=2.0), atol=1e-5, rtol=1e-5)


def test_reference_write_kv_cache_fills_exactly_the_mapped_slots() -> None:
    key_cache = torch.full((5, 4, 2, 8), float("nan"))
    value_cache = torch.full((5, 4, 2, 8), float("nan"))
    slots = torch.tensor([13, 2, 7], dtype=torch.int64)
    key, value = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    ref.write_kv_cache(key, value, key_cache, value_cache, slots)
    torch.testing.assert_close(key_cache.view(-1, 2, 8)[slots], key)
    torch.testing.assert_close(value_cache.view(-1, 2, 8)[slots], value)
    assert key_cache.isnan().sum() == key_cache.numel() - key.numel()


@pytest.mark.xfail(
    strict=True, reason="documented precondition: the pool holds finite values (the engine zeroes it)"
)
def test_reference_ignores_nan_in_unwritten_slots(paged_batch) -> None:
    batch = paged_batch([3], [1], block_size=4)  # slot 3 of the only block is never written
    block = batch.meta.block_tables[0, 0]
    batch.value_cache[block, 3] = float("nan")  # what torch.empty memory may hold
    out = ref.paged_attention(batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
    assert not out.isnan().any()
