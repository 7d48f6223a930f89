"""Shared builders for the attention tests: random paged batches and a dense, mask-based oracle.

Without CUDA, Triton kernels run in the interpreter; the switch must be set before triton itself is
imported (its standard library is decorated at import), so it is set here, before anything else.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # before `rollout` is imported: it pulls in transformers, then triton
    os.environ.setdefault("TRITON_INTERPRET", "1")

import math  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import pytest  # noqa: E402

from rollout.ops.attention_metadata import AttentionMetadata  # noqa: E402


@dataclass
class PagedBatch:
    """A packed batch whose K/V sit in a shuffled block pool, plus the same K/V laid out densely."""

    query: torch.Tensor  # [T, num_heads, head_dim]
    key_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor
    meta: AttentionMetadata
    keys: list[torch.Tensor]  # per sequence: [seq_len, num_kv_heads, head_dim]
    values: list[torch.Tensor]


def make_paged_batch(
    seq_lens: list[int],
    query_lens: list[int],
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    block_size: int = 4,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    seed: int = 0,
) -> PagedBatch:
    """Random K/V for every cached position, blocks drawn from a shuffled pool with spare blocks."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [math.ceil(n / block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3  # spare blocks hold garbage that must never be read
    pool = torch.randperm(num_blocks, generator=gen).tolist()
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    key_cache = torch.randn(shape, generator=gen).to(dtype)
    value_cache = torch.randn(shape, generator=gen).to(dtype)
    max_blocks = max(blocks_per_seq) + 1  # one column of padding, like a real table
    tables = torch.zeros(len(seq_lens), max_blocks, dtype=torch.int32)
    slots, keys, values = [], [], []
    for s, (seq_len, q_len) in enumerate(zip(seq_lens, query_lens, strict=True)):
        ids = [pool.pop() for _ in range(blocks_per_seq[s])]
        tables[s, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        keys.append(key_cache[ids].flatten(0, 1)[:seq_len].to(device))
        values.append(value_cache[ids].flatten(0, 1)[:seq_len].to(device))
        slots += [ids[p // block_size] * block_size + p % block_size for p in range(seq_len - q_len, seq_len)]
    meta = AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=torch.tensor([0, *_cumsum(query_lens)], dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=tables.to(device),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=list(query_lens),
        seq_lens_cpu=list(seq_lens),
    )
    query = torch.randn(sum(query_lens), num_heads, head_dim, generator=gen).to(dtype).to(device)
    return PagedBatch(query, key_cache.to(device), value_cache.to(device), meta, keys, values)


def dense_attention(
    batch: PagedBatch,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:  # [T, num_heads, head_dim] fp32
    """Plain softmax over each sequence's contiguous K/V with an explicit causal (+window, +chunk) mask."""
    outs = []
    starts = [0, *_cumsum(batch.meta.query_lens_cpu)]
    for s, seq_len in enumerate(batch.meta.seq_lens_cpu):
        q = batch.query[starts[s] : starts[s + 1]].float()  # [q_len, H, D]
        group = q.shape[1] // batch.keys[s].shape[1]
        k = batch.keys[s].float().repeat_interleave(group, dim=1)  # [seq_len, H, D]
        v = batch.values[s].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale  # [H, q_len, seq_len]
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        q_pos = torch.arange(seq_len - q.shape[0], seq_len, device=q.device)[:, None]
        k_pos = torch.arange(seq_len, device=q.device)[None, :]
        mask = k_pos <= q_pos
        if sliding_window is not None:
            mask &= k_pos > q_pos - sliding_window
        if chunk_size is not None:
            mask &= k_pos // chunk_size == q_pos // chunk_size
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        outs.append(torch.einsum("hqk,khd->qhd", probs, v))
    return torch.cat(outs)


def _cumsum(xs: list[int]) -> list[int]:
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out


@pytest.fixture
def paged_batch() -> Callable[..., PagedBatch]:
    """The `make_paged_batch` builder, for test modules (conftest is not importable by name)."""
    return make_paged_batch


@pytest.fixture
def dense_oracle() -> Callable[..., torch.Tensor]:
    """The `dense_attention` oracle."""
    return dense_attention
