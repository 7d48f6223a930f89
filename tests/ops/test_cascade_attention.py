"""Cascade decode attention (shared prompt blocks read once per group) equals the torch reference."""

from __future__ import annotations

import pytest
import torch

from rollout.ops import paged_attention_ref as ref
from rollout.ops.attention_metadata import AttentionMetadata
from rollout.ops.cascade_attention import plan_cascade
from rollout.ops.paged_attention_sdpa import SdpaPagedAttention

BLOCK = 4


def forked_batch(
    prompts: list[int],
    n: int,
    generated: list[list[int]],
    num_heads: int = 4,
    num_kv_heads: int = 2,
    extra_prefill: int = 0,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Prompt p's n forks share its full prompt blocks; each fork owns a copy of the partial block
    and its generated tokens; every fork decodes one token. `extra_prefill`: one more sequence that
    prefills that many tokens (a mixed batch)."""
    gen = torch.Generator().manual_seed(seed)
    next_block = iter(range(1, 10_000))
    tables, seq_lens, query_lens = [], [], []
    for p, prompt_len in enumerate(prompts):
        shared = [next(next_block) for _ in range(prompt_len // BLOCK)]
        for i in range(n):
            seq_len = prompt_len + generated[p][i]
            own = -(-seq_len // BLOCK) - len(shared)
            tables.append(shared + [next(next_block) for _ in range(own)])
            seq_lens.append(seq_len)
            query_lens.append(1)
    if extra_prefill:
        tables.append([next(next_block) for _ in range(-(-extra_prefill // BLOCK))])
        seq_lens.append(extra_prefill)
        query_lens.append(extra_prefill)
    num_blocks = next(next_block)
    key_cache = torch.randn(num_blocks, BLOCK, num_kv_heads, 16, generator=gen)
    value_cache = torch.randn(num_blocks, BLOCK, num_kv_heads, 16, generator=gen)
    width = max(len(t) for t in tables) + 1
    block_tables = torch.zeros(len(tables), width, dtype=torch.int32)
    for s, t in enumerate(tables):
        block_tables[s, : len(t)] = torch.tensor(t)
    cu = [0]
    for q in query_lens:
        cu.append(cu[-1] + q)
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(cu[-1], dtype=torch.int64),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        block_tables=block_tables,
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=query_lens,
        seq_lens_cpu=seq_lens,
    )
    query = torch.randn(cu[-1], num_heads, 16, generator=gen)
    return query, key_cache, value_cache, meta


CASES = {
    "forks": ([9, 16, 23], 3, [[1, 5, 9], [1, 1, 2], [7, 3, 12]], 0),
    "forks and a prefill": ([9, 16], 2, [[2, 6], [1, 4]], 11),
    "one prompt, aligned prompt": ([8], 4, [[1, 2, 3, 30]], 0),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 2), (4, 1), (2, 2)])
def test_cascade_equals_the_reference(case: str, num_heads: int, num_kv_heads: int) -> None:
    prompts, n, generated, prefill = CASES[case]
    query, kc, vc, meta = forked_batch(prompts, n, generated, num_heads, num_kv_heads, prefill)
    attention = SdpaPagedAttention()
    attention.cascade_read_fraction = 1.0  # whenever blocks are shared, however few
    out = attention(query, kc, vc, meta, 0.25)
    assert attention._cascade is not None  # the shared blocks were found
    torch.testing.assert_close(out, ref.paged_attention(query, kc, vc, meta, 0.25), atol=1e-5, rtol=1e-5)


def test_features_the_cascade_lacks_take_the_plain_path() -> None:
    query, kc, vc, meta = forked_batch([9, 16], 3, [[1, 5, 9], [2, 2, 3]])
    attention = SdpaPagedAttention()
    attention.cascade_read_fraction = 1.0
    for window in (3, None):
        out = attention(query, kc, vc, meta, 0.25, sliding_window=window, chunk_size=8)
        want = ref.paged_attention(query, kc, vc, meta, 0.25, window, chunk_size=8)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_sequences_that_share_nothing_get_no_cascade_plan() -> None:
    query, kc, vc, meta = forked_batch([3, 5, 7], 1, [[1], [2], [3]])
    assert plan_cascade(meta, list(range(meta.num_seqs)), BLOCK, torch.device("cpu")) is None


def test_only_blocks_below_every_members_newest_token_are_shared() -> None:
    """Two sequences whose whole tables are the same 2 blocks, the newest token at position 7 in
    the second: only the first block is a prefix (the second holds the queries' own position)."""
    query, kc, vc, meta = forked_batch([8], 2, [[0, 0]])
    plan = plan_cascade(meta, [0, 1], BLOCK, torch.device("cpu"), max_read_fraction=1.0)
    assert plan is not None and plan.prefix_keys == 4 and plan.suffix_keys == 4
    attention = SdpaPagedAttention()
    attention.cascade_read_fraction = 1.0
    out = attention(query, kc, vc, meta, 0.25)
    torch.testing.assert_close(out, ref.paged_attention(query, kc, vc, meta, 0.25), atol=1e-5, rtol=1e-5)


def test_the_cascade_is_chosen_only_where_it_reads_far_fewer_blocks() -> None:
    """Long shared prompts, short suffixes: ~0.2 of the blocks (taken). Short prompts, long
    suffixes: the padded groups read more than the plain path would (declined)."""
    cpu = torch.device("cpu")
    _, _, _, long_prompts = forked_batch([120, 128], 8, [[1, 2, 3, 4, 5, 6, 7, 8]] * 2)
    assert plan_cascade(long_prompts, list(range(16)), BLOCK, cpu) is not None
    _, _, _, short_prompts = forked_batch([5, 9], 8, [[1, 40, 3, 4, 5, 6, 7, 60]] * 2)
    assert plan_cascade(short_prompts, list(range(16)), BLOCK, cpu) is None
    assert plan_cascade(short_prompts, list(range(16)), BLOCK, cpu, max_read_fraction=1.0) is not None
