"""The decode kernel serves rows whose block tables share their first blocks (a prompt's n samples)
together: each shared key is read once for the whole group. The groups must be invisible: every row
equals the reference, and equals, bit for bit, the kernel's result for that row alone."""

from __future__ import annotations

import shutil

import pytest
import torch

from rollout.ops import paged_attention_ref as ref
from rollout.ops.attention_metadata import AttentionMetadata
from rollout.ops.cpu_kernels import load_cpu_kernels
from rollout.ops.cpu_paged_decode import DecodeRows, decode_attention

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

SCALE = 0.3


def shared_prefix_batch(
    rows: list[tuple[int, int, int]],  # per row: (prompt id, prompt length, own tokens after the prompt)
    prompt_lens: dict[int, int],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Rows of one prompt share the prompt's full blocks by id, as forks do; the partial last block
    and everything after it are each row's own (copy on write). Blocks come from a shuffled pool."""
    gen = torch.Generator().manual_seed(seed)
    full = {p: n // block_size for p, n in prompt_lens.items()}
    own = [-(-(prompt_lens[p] - full[p] * block_size + extra) // block_size) for p, _, extra in rows]
    num_blocks = sum(full.values()) + sum(own) + 2
    pool = torch.randperm(num_blocks, generator=gen).tolist()
    shared = {p: [pool.pop() for _ in range(full[p])] for p in prompt_lens}
    tables = [shared[p] + [pool.pop() for _ in range(n)] for (p, _, _), n in zip(rows, own, strict=True)]
    width = max(len(t) for t in tables) + 1
    block_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32)
    seq_lens = [prompt_lens[p] + extra for p, _, extra in rows]
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache, value_cache = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(len(rows), dtype=torch.int64),
        cu_seqlens_q=torch.arange(len(rows) + 1, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_tables=block_tables,
        max_query_len=1,
        max_seq_len=max(seq_lens),
        query_lens_cpu=[1] * len(rows),
        seq_lens_cpu=seq_lens,
    )
    query = torch.randn(len(rows), num_heads, head_dim, generator=gen)
    return query, key_cache, value_cache, meta


def kernel(query, key_cache, value_cache, meta, rows: slice | None = None, **masking) -> torch.Tensor:
    rows = rows or slice(None)
    plan = DecodeRows(None, meta.block_tables[rows].contiguous(), meta.seq_lens[rows].long())
    masks = (masking.get("sliding_window"), masking.get("chunk_size"))
    return decode_attention(load_cpu_kernels(), query[rows], key_cache, value_cache, plan, SCALE, masks)


# A prompt's samples in a row (more than one group's worth for prompt 0), a prompt shorter than a
# block (nothing shared), prompts that end on a block boundary, and a lone row between groups.
PROMPTS = {0: 37, 1: 5, 2: 48, 3: 64}
ROWS = [(0, 37, extra) for extra in range(20)] + [(1, 5, 3), (1, 5, 9), (3, 64, 0), (2, 48, 1), (2, 48, 17)]


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(8, 2), (4, 4)])
@pytest.mark.parametrize(("head_dim", "block_size"), [(64, 16), (128, 16), (32, 5), (24, 16), (96, 8)])
@pytest.mark.parametrize("masking", [{}, dict(sliding_window=20)], ids=str)
def test_grouped_rows_equal_the_reference_and_themselves_alone(
    num_heads: int, num_kv_heads: int, head_dim: int, block_size: int, masking: dict
) -> None:
    """Head sizes 32-128 take the register-tiled paths (16-key tiles on AVX-512), 24 the generic one;
    a sliding window keeps rows out of groups."""
    batch = shared_prefix_batch(ROWS, PROMPTS, num_heads, num_kv_heads, head_dim, block_size, seed=head_dim)
    out = kernel(*batch, **masking)
    torch.testing.assert_close(out, ref.paged_attention(*batch, SCALE, **masking), atol=1e-5, rtol=1e-5)
    for r in range(len(ROWS)):
        assert torch.equal(out[r], kernel(*batch, rows=slice(r, r + 1), **masking)[0]), f"row {r}"


def test_a_group_serves_rows_that_share_only_some_blocks() -> None:
    """Rows 0-1 share two blocks, rows 2-3 only the first of them (a common system prompt): the first
    group keeps both of its blocks, the second shares one, and every row is exact."""
    query, key_cache, value_cache, meta = shared_prefix_batch(
        [(0, 40, 2), (0, 40, 7)], {0: 40}, 4, 2, 64, 16, seed=3
    )
    tables = meta.block_tables.clone()
    tables = torch.cat([tables, tables.clone()])  # rows 2-3: the same prompt's first block only
    tables[2:, 1] = torch.tensor([tables.max() + 1, tables.max() + 2], dtype=torch.int32)
    gen = torch.Generator().manual_seed(4)
    key_cache = torch.cat([key_cache, torch.randn(2, *key_cache.shape[1:], generator=gen)])
    value_cache = torch.cat([value_cache, torch.randn(2, *value_cache.shape[1:], generator=gen)])
    seq_lens = torch.cat([meta.seq_lens, meta.seq_lens])
    meta = AttentionMetadata(
        torch.zeros(4, dtype=torch.int64), torch.arange(5, dtype=torch.int32), seq_lens, tables, 1,
        int(seq_lens.max()), [1] * 4, seq_lens.tolist(),
    )  # fmt: skip
    query = torch.cat([query, torch.randn(query.shape, generator=gen)])
    out = kernel(query, key_cache, value_cache, meta)
    torch.testing.assert_close(
        out, ref.paged_attention(query, key_cache, value_cache, meta, SCALE), atol=1e-5, rtol=1e-5
    )
    for r in range(4):
        assert torch.equal(out[r], kernel(query, key_cache, value_cache, meta, rows=slice(r, r + 1))[0])
