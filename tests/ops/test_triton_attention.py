"""Triton paged-attention kernels against the torch reference (interpreter on CPU, compiled on CUDA)."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from rollout.ops import paged_attention_ref as ref  # noqa: E402
from rollout.ops import triton_attention as tri  # noqa: E402
from rollout.ops.attention_metadata import AttentionMetadata  # noqa: E402

ON_CUDA = torch.cuda.is_available()
# The interpreter only works if TRITON_INTERPRET was set before triton was first imported (tests/ops/
# conftest.py sets it, but a test module elsewhere that imports `rollout` earlier in the run is first).
_INTERPRETING = type(triton.language.standard.max).__name__ == "InterpretedFunction"
pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(
        not ON_CUDA and not _INTERPRETING,
        reason="no CUDA and triton was imported before TRITON_INTERPRET=1 was set: export it, or set it in a root conftest",
    ),
]

# Without CUDA the interpreter runs fp32 only; on CUDA the half types run too, with their tolerances.
TOLERANCES = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}
TARGETS = [("cuda", dtype) for dtype in TOLERANCES] if ON_CUDA else [("cpu", torch.float32)]

# (seq_lens, query_lens): a 70-token context spans 18 blocks of 4 and 5 decode partitions of 16
DECODE_MIXED_CONTEXTS = ([1, 5, 37, 70], [1, 1, 1, 1])
PREFILL_WITH_CONTEXT = ([9, 40], [3, 21])
MIXED = ([17, 6, 30, 2], [1, 6, 5, 1])
CASES = {"decode": DECODE_MIXED_CONTEXTS, "prefill": PREFILL_WITH_CONTEXT, "mixed": MIXED}
PARTITION = 16  # small, so decode cases exercise the cross-partition reduce


def assert_matches_reference(batch, scale: float = 0.25, **kwargs) -> None:
    args = (batch.query, batch.key_cache, batch.value_cache, batch.meta, scale)
    out = tri.paged_attention(*args, partition_size=PARTITION, **kwargs)
    expected = ref.paged_attention(*args, **kwargs)
    tol = TOLERANCES[batch.query.dtype]
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


@pytest.mark.parametrize("seed", [101, 202, 303])  # fixed, so a failure reproduces; in the test id
@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_kernels_match_reference(paged_batch, device: str, dtype: torch.dtype, case: str, seed: int) -> None:
    batch = paged_batch(*CASES[case], dtype=dtype, device=device, seed=seed)
    assert_matches_reference(batch)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 1), (4, 2), (6, 2)])
@pytest.mark.parametrize("case", ["decode", "mixed"])
def test_kernels_handle_grouped_query_heads(
    paged_batch, device: str, dtype: torch.dtype, num_heads: int, num_kv_heads: int, case: str
) -> None:
    batch = paged_batch(
        *CASES[case], num_heads=num_heads, num_kv_heads=num_kv_heads, dtype=dtype, device=device
    )
    assert_matches_reference(batch)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_kernels_apply_sliding_window(paged_batch, device: str, dtype: torch.dtype, case: str) -> None:
    assert_matches_reference(paged_batch(*CASES[case], dtype=dtype, device=device, seed=3), sliding_window=5)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_kernels_apply_chunked_attention(paged_batch, device: str, dtype: torch.dtype, case: str) -> None:
    """Chunks of 8 (a partition of 16 holds two; a 70-token context ends mid-chunk) and of 20."""
    batch = paged_batch(*CASES[case], dtype=dtype, device=device, seed=13)
    assert_matches_reference(batch, chunk_size=8)
    assert_matches_reference(batch, chunk_size=20)
    assert_matches_reference(batch, sliding_window=5, chunk_size=8)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize("case", ["decode", "mixed"])
def test_kernels_apply_softcap(paged_batch, device: str, dtype: torch.dtype, case: str) -> None:
    batch = paged_batch(*CASES[case], dtype=dtype, device=device, seed=5)
    assert_matches_reference(batch, scale=1.0, softcap=2.0)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize("case", CASES)
def test_kernels_apply_attention_sinks(paged_batch, device: str, dtype: torch.dtype, case: str) -> None:
    batch = paged_batch(*CASES[case], num_heads=4, num_kv_heads=2, dtype=dtype, device=device, seed=11)
    sinks = torch.tensor([3.0, -1.0, 0.5, 8.0], device=device)  # 8.0 outweighs every score: output shrinks
    assert_matches_reference(batch, sinks=sinks)
    assert_matches_reference(batch, sliding_window=5, sinks=sinks)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize(("head_dim", "block_size"), [(32, 16), (64, 8), (128, 16), (24, 5)])
@pytest.mark.parametrize("case", ["decode", "mixed"])
def test_kernels_handle_head_dims_and_block_sizes(
    paged_batch, device: str, dtype: torch.dtype, head_dim: int, block_size: int, case: str
) -> None:
    batch = paged_batch(*CASES[case], head_dim=head_dim, block_size=block_size, dtype=dtype, device=device)
    assert_matches_reference(batch, scale=head_dim**-0.5)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
@pytest.mark.parametrize("case", ["decode", "mixed"])
def test_kernels_never_read_unwritten_slots(paged_batch, device: str, dtype: torch.dtype, case: str) -> None:
    batch = paged_batch(*CASES[case], dtype=dtype, device=device, seed=9)
    expected = ref.paged_attention(batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
    for cache in (batch.key_cache, batch.value_cache):
        poison_unused_slots(cache, batch.meta)
    out = tri.paged_attention(
        batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25, partition_size=PARTITION
    )
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)


def poison_unused_slots(cache: torch.Tensor, meta) -> None:
    """Sets to NaN every slot past a sequence's length and every block no sequence owns."""
    block_size = cache.shape[1]
    used = torch.zeros(cache.shape[:2], dtype=torch.bool)
    for s, seq_len in enumerate(meta.seq_lens_cpu):
        for pos in range(seq_len):
            used[meta.block_tables[s, pos // block_size].item(), pos % block_size] = True
    cache[~used.to(cache.device)] = float("nan")


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
def test_write_kv_cache_fills_mapped_slots_and_nothing_else(device: str, dtype: torch.dtype) -> None:
    num_blocks, block_size, num_kv_heads, head_dim = 6, 4, 2, 16
    key_cache = torch.full((num_blocks, block_size, num_kv_heads, head_dim), -7.0, dtype=dtype, device=device)
    value_cache = key_cache.clone()
    slots = torch.tensor([13, 2, 7, 22, 0], dtype=torch.int64, device=device)
    key = torch.randn(5, num_kv_heads, head_dim, device=device).to(dtype)
    value = torch.randn(5, num_kv_heads, head_dim, device=device).to(dtype)
    tri.write_kv_cache(key, value, key_cache, value_cache, slots)
    flat_k, flat_v = key_cache.view(-1, num_kv_heads, head_dim), value_cache.view(-1, num_kv_heads, head_dim)
    torch.testing.assert_close(flat_k[slots], key, atol=0, rtol=0)
    torch.testing.assert_close(flat_v[slots], value, atol=0, rtol=0)
    untouched = torch.ones(flat_k.shape[0], dtype=torch.bool, device=device)
    untouched[slots] = False
    assert (flat_k[untouched] == -7.0).all() and (flat_v[untouched] == -7.0).all()


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
def test_write_kv_cache_reads_strided_key_views_and_skips_negative_slots(
    device: str, dtype: torch.dtype
) -> None:
    key_cache = torch.zeros(3, 4, 2, 16, dtype=dtype, device=device)
    value_cache = torch.zeros_like(key_cache)
    kv = torch.randn(3, 4, 16, device=device).to(dtype)  # fused [T, 2 * num_kv_heads, D] projection
    key, value = kv[:, :2], kv[:, 2:]
    slots = torch.tensor([5, -1, 9], dtype=torch.int64, device=device)
    tri.write_kv_cache(key, value, key_cache, value_cache, slots)
    expected_k, expected_v = torch.zeros_like(key_cache), torch.zeros_like(value_cache)
    ref.write_kv_cache(key[[0, 2]], value[[0, 2]], expected_k, expected_v, slots[[0, 2]])
    assert torch.equal(key_cache, expected_k) and torch.equal(value_cache, expected_v)


def test_paged_attention_rejects_mismatched_dtypes(paged_batch) -> None:
    batch = paged_batch(*MIXED)
    with pytest.raises(ValueError, match="dtype"):
        tri.paged_attention(batch.query.double(), batch.key_cache, batch.value_cache, batch.meta, 0.25)


@pytest.mark.parametrize(("device", "dtype"), TARGETS)
def test_decode_with_a_length_bound_and_empty_padding_rows_matches_reference(
    paged_batch, device: str, dtype: torch.dtype
) -> None:
    """What a CUDA-graph decode step launches: max_seq_len is a fixed bound, padding rows have length 0."""
    batch = paged_batch(*DECODE_MIXED_CONTEXTS, dtype=dtype, device=device, seed=11)
    expected = ref.paged_attention(batch.query, batch.key_cache, batch.value_cache, batch.meta, 0.25)
    for cache in (batch.key_cache, batch.value_cache):
        poison_unused_slots(cache, batch.meta)  # the bound must not make anyone read past its length
    query, meta = pad_decode_batch(batch.query, batch.meta, num_padding=3, bound=4 * batch.meta.max_seq_len)
    out = tri.paged_attention(query, batch.key_cache, batch.value_cache, meta, 0.25, partition_size=PARTITION)
    tol = TOLERANCES[dtype]
    real = batch.query.shape[0]
    torch.testing.assert_close(out[:real], expected, atol=tol, rtol=tol)
    assert (out[real:] == 0).all()


def pad_decode_batch(query: torch.Tensor, meta, num_padding: int, bound: int):
    """The decode batch plus `num_padding` zero-length rows, with every host length set to `bound`."""
    num_seqs = meta.num_seqs + num_padding
    device = query.device
    padding_query = torch.randn(num_padding, *query.shape[1:], device=device).to(query.dtype)
    tables = torch.cat([meta.block_tables, torch.zeros_like(meta.block_tables[:num_padding])])
    padded = AttentionMetadata(
        slot_mapping=torch.cat([meta.slot_mapping, meta.slot_mapping.new_zeros(num_padding)]),
        cu_seqlens_q=torch.arange(num_seqs + 1, dtype=torch.int32, device=device),
        seq_lens=torch.cat([meta.seq_lens, meta.seq_lens.new_zeros(num_padding)]),
        block_tables=tables,
        max_query_len=1,
        max_seq_len=bound,
        query_lens_cpu=[1] * num_seqs,
        seq_lens_cpu=[bound] * num_seqs,
    )
    return torch.cat([query, padding_query]), padded
