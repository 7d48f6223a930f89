"""Torch reference for paged attention: the CPU backend and the oracle the Triton kernels are tested against.

K/V live in a block pool `[num_blocks, block_size, num_kv_heads, head_dim]` per layer. New K/V are
written through `slot_mapping`; attention reads past K/V through `block_tables`, one tile of blocks
at a time with an online softmax (the flash-decoding recurrence), so no request's whole KV is ever
materialized and no mask spans the packed batch.

Precondition: every slot a block table points at holds finite values (the engine allocates the pool
zeroed and only ever writes model K/V into it). Masked slots get probability 0, but 0 * NaN is NaN,
and zeroing V per tile would double the CPU cost of decode.
"""

from __future__ import annotations

import torch

from rollout.ops.attention_metadata import AttentionMetadata

# Blocks read per tile; 64 x 16 tokens covers most contexts on CPU in one pass.
DEFAULT_TILE_BLOCKS = 64


def write_kv_cache(
    key: torch.Tensor,  # [T, num_kv_heads, head_dim]
    value: torch.Tensor,  # [T, num_kv_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [T] int64
) -> None:
    key_cache.view(-1, *key_cache.shape[-2:]).index_copy_(0, slot_mapping, key.to(key_cache.dtype))
    value_cache.view(-1, *value_cache.shape[-2:]).index_copy_(0, slot_mapping, value.to(value_cache.dtype))


def paged_attention(
    query: torch.Tensor,  # [T, num_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    tile_blocks: int = DEFAULT_TILE_BLOCKS,
    *,
    sinks: torch.Tensor | None = None,  # [num_heads]: a per-head logit in every softmax (gpt-oss)
    chunk_size: int | None = None,  # chunked local attention (Llama 4): keys of the query's chunk only
) -> torch.Tensor:  # [T, num_heads, v_head_dim]
    """Causal attention of each sequence's new tokens over its paged context.

    The value cache may be narrower than the key cache (MLA): the output takes V's head size. With
    `chunk_size`, a query at position p sees the keys k <= p with k // chunk_size == p // chunk_size.
    """
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    out = query.new_empty(*query.shape[:2], value_cache.shape[-1])
    decode = [s for s, q_len in enumerate(meta.query_lens_cpu) if q_len == 1]
    other = [s for s, q_len in enumerate(meta.query_lens_cpu) if q_len > 1]
    for group in (decode, other):
        if group:
            _attend_group(
                query,
                key_cache,
                value_cache,
                meta,
                group,
                out,
                scale,
                sliding_window,
                softcap,
                tile_blocks,
                sinks,
                chunk_size,
            )
    return out


def _attend_group(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    seqs: list[int],
    out: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    softcap: float | None,
    tile_blocks: int,
    sinks: torch.Tensor | None,
    chunk_size: int | None,
) -> None:
    """Pads the group's queries to its longest and runs the tiled online softmax for all at once."""
    device = query.device
    num_heads, head_dim = query.shape[1:]
    num_kv_heads = key_cache.shape[2]
    group_size = num_heads // num_kv_heads
    q_lens = [meta.query_lens_cpu[s] for s in seqs]
    all_starts = [0]
    for q_len in meta.query_lens_cpu[:-1]:
        all_starts.append(all_starts[-1] + q_len)
    starts = [all_starts[s] for s in seqs]
    max_q = max(q_lens)
    # rows: index of each (seq, j) query in the packed batch; padding rows repeat the seq's last row
    rows = torch.tensor(
        [
            start + min(j, q_len - 1)
            for start, q_len in zip(starts, q_lens, strict=True)
            for j in range(max_q)
        ],
        device=device,
    ).view(len(seqs), max_q)
    seq_idx = torch.tensor(seqs, device=device)
    seq_lens = meta.seq_lens[seq_idx].long()  # [S]
    q_pos = (
        seq_lens[:, None] - torch.tensor(q_lens, device=device)[:, None] + torch.arange(max_q, device=device)
    )
    # q: [S, num_kv_heads, group_size * max_q, head_dim] in fp32
    q = query[rows].float().view(len(seqs), max_q, num_kv_heads, group_size, head_dim)
    q = q.permute(0, 2, 3, 1, 4).reshape(len(seqs), num_kv_heads, group_size * max_q, head_dim) * scale
    q_pos_rows = q_pos.repeat(1, group_size)[:, None, :, None]  # [S, 1, G*max_q, 1]
    block_tables = meta.block_tables[seq_idx].long()
    max_seq_len = max(meta.seq_lens_cpu[s] for s in seqs)
    acc, m, denom = _online_softmax(
        q,
        key_cache,
        value_cache,
        block_tables,
        seq_lens,
        q_pos_rows,
        max_seq_len,
        sliding_window,
        softcap,
        tile_blocks,
        chunk_size,
    )
    if sinks is not None:
        acc, denom = _add_sinks(acc, m, denom, sinks, num_kv_heads, max_q)
    v_head_dim = value_cache.shape[-1]
    o = (acc / denom).view(len(seqs), num_kv_heads, group_size, max_q, v_head_dim).permute(0, 3, 1, 2, 4)
    o = o.reshape(len(seqs), max_q, num_heads, v_head_dim)
    valid = torch.arange(max_q, device=device)[None, :] < torch.tensor(q_lens, device=device)[:, None]
    out[rows[valid]] = o[valid].to(out.dtype)


def _add_sinks(
    acc: torch.Tensor,  # [S, Hkv, R, Dv] with rows ordered (group member, query)
    m: torch.Tensor,  # [S, Hkv, R, 1]
    denom: torch.Tensor,
    sinks: torch.Tensor,  # [num_heads]
    num_kv_heads: int,
    max_q: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's sink logit joins the softmax's denominator (and adds nothing to the output)."""
    sink = sinks.float().view(num_kv_heads, -1).repeat_interleave(max_q, dim=1)[None, :, :, None]
    m_new = torch.maximum(m, sink)
    alpha = torch.exp(m - m_new)
    return acc * alpha, denom * alpha + torch.exp(sink - m_new)


def _online_softmax(
    q: torch.Tensor,  # [S, Hkv, R, D] (scaled)
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,  # [S, max_blocks]
    seq_lens: torch.Tensor,  # [S]
    q_pos: torch.Tensor,  # [S, 1, R, 1]
    max_seq_len: int,
    sliding_window: int | None,
    softcap: float | None,
    tile_blocks: int,
    chunk_size: int | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    num_seqs, num_kv_heads, num_rows, head_dim = q.shape
    block_size = key_cache.shape[1]
    neg = torch.finfo(torch.float32).min
    acc = q.new_zeros(*q.shape[:3], value_cache.shape[-1])
    m = torch.full((num_seqs, num_kv_heads, num_rows, 1), neg, device=q.device)
    denom = torch.zeros_like(m)
    num_blocks = (max_seq_len + block_size - 1) // block_size
    for first in range(0, num_blocks, tile_blocks):
        tile = block_tables[:, first : min(first + tile_blocks, num_blocks)]  # [S, nb]
        k = key_cache[tile].flatten(1, 2).transpose(1, 2).float()  # [S, Hkv, L, D]
        v = value_cache[tile].flatten(1, 2).transpose(1, 2).float()
        k_pos = first * block_size + torch.arange(k.shape[2], device=q.device)  # [L]
        scores = q @ k.transpose(-1, -2)  # [S, Hkv, R, L]
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        mask = (k_pos <= q_pos) & (k_pos < seq_lens[:, None, None, None])
        if sliding_window is not None:
            mask &= k_pos > q_pos - sliding_window
        if chunk_size is not None:
            mask &= k_pos // chunk_size == q_pos // chunk_size
        scores = scores.masked_fill(~mask, neg)
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new) * mask
        alpha = torch.exp(m - m_new)
        denom = denom * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ v
        m = m_new
    return acc, m, denom.clamp_min(1e-30)
