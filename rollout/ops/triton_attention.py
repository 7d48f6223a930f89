"""Triton paged-attention kernels: the GPU twin of `paged_attention_ref`, same signatures, same layout.

Three kernels: a KV write through `slot_mapping`; a varlen prefill/mixed kernel (one tile of query
rows x the query heads sharing one KV head, online softmax over paged K/V); and a flash-decoding
kernel for decode-only batches that splits each context into partitions, reduced by a second kernel.
The wrappers only check layouts and compute grids from host ints in the metadata: no device syncs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rollout.ops.attention_metadata import AttentionMetadata

# Tokens of one decode partition; a multiple of every KV tile below. Long contexts get more programs.
DEFAULT_PARTITION_SIZE = 512
_SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _write_kv_kernel(
    key_ptr, value_ptr, key_cache_ptr, value_cache_ptr, slot_mapping_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_cs, stride_ch,
    HEAD_DIM: tl.constexpr, NUM_ELEMS: tl.constexpr, BLOCK: tl.constexpr, BLOCK_SIZE: tl.constexpr,
):  # fmt: skip
    """One program per token: copies its [num_kv_heads, head_dim] K and V rows to its cache slot."""
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token)
    if slot < 0:  # padding token (e.g. a CUDA-graph batch padded to a captured size)
        return
    offs = tl.arange(0, BLOCK)
    mask = offs < NUM_ELEMS
    head, dim = offs // HEAD_DIM, offs % HEAD_DIM
    cache_off = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_cs + head * stride_ch + dim
    k = tl.load(key_ptr + token * stride_kt + head * stride_kh + dim, mask=mask)
    v = tl.load(value_ptr + token * stride_vt + head * stride_vh + dim, mask=mask)
    tl.store(key_cache_ptr + cache_off, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(value_cache_ptr + cache_off, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _attend_kv_range(
    q, q_pos, acc, m_i, l_i,  # q: [M, DP] native dtype; q_pos: [M]; acc: [M, DP] fp32; m_i, l_i: [M]
    kv_start, kv_end, block_table_ptr, key_cache_ptr, value_cache_ptr, kv_head,
    stride_cb, stride_cs, stride_ch, scale, softcap, sliding_window, chunk_size,
    HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_WINDOW: tl.constexpr, USE_SOFTCAP: tl.constexpr, USE_CHUNK: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Online-softmax update of (acc, m_i, l_i) with the cache positions [kv_start, kv_end)."""
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_mask = dims < HEAD_DIM
    for start in range(kv_start, kv_end, BLOCK_N):
        k_pos = start + tl.arange(0, BLOCK_N)  # [N]
        k_valid = k_pos < kv_end
        block_ids = tl.load(block_table_ptr + k_pos // BLOCK_SIZE, mask=k_valid, other=0).to(tl.int64)
        row_off = block_ids * stride_cb + (k_pos % BLOCK_SIZE) * stride_cs + kv_head * stride_ch  # [N]
        k_mask = dim_mask[:, None] & k_valid[None, :]
        k_t = tl.load(key_cache_ptr + row_off[None, :] + dims[:, None], mask=k_mask, other=0.0)  # [DP, N]
        v_mask = k_valid[:, None] & dim_mask[None, :]
        v = tl.load(value_cache_ptr + row_off[:, None] + dims[None, :], mask=v_mask, other=0.0)  # [N, DP]
        s = tl.dot(q, k_t, input_precision=DOT_PRECISION) * scale  # [M, N] fp32
        if USE_SOFTCAP:  # softcap * tanh(s / softcap), tanh written with exp to stay portable
            s = softcap * (1.0 - 2.0 / (tl.exp(2.0 * s / softcap) + 1.0))
        mask = k_valid[None, :] & (k_pos[None, :] <= q_pos[:, None])
        if USE_WINDOW:
            mask &= k_pos[None, :] > q_pos[:, None] - sliding_window
        if USE_CHUNK:  # chunked local attention: only the keys of the query's own chunk
            mask &= (k_pos[None, :] // chunk_size) == (q_pos[:, None] // chunk_size)
        s = tl.where(mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))  # m_i starts finite, so fully masked rows give p = 0
        p = tl.exp2((s - m_new[:, None]) * 1.4426950408889634)
        alpha = tl.exp2((m_i - m_new) * 1.4426950408889634)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _prefill_kernel(
    query_ptr, key_cache_ptr, value_cache_ptr, out_ptr, block_tables_ptr, cu_seqlens_q_ptr, seq_lens_ptr,
    sinks_ptr,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_cs, stride_ch, stride_bt,
    scale, softcap, sliding_window, chunk_size,
    GROUP_SIZE: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_WINDOW: tl.constexpr, USE_SOFTCAP: tl.constexpr, USE_SINKS: tl.constexpr, USE_CHUNK: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Program (seq, q_tile, kv_head): BLOCK_M // GROUP_PAD query tokens x the GROUP_SIZE heads of kv_head."""
    seq, q_tile, kv_head = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    BLOCK_Q: tl.constexpr = BLOCK_M // GROUP_PAD
    q_start = tl.load(cu_seqlens_q_ptr + seq)
    q_len = tl.load(cu_seqlens_q_ptr + seq + 1) - q_start
    if q_tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - q_len
    rows = tl.arange(0, BLOCK_M)
    tok = q_tile * BLOCK_Q + rows // GROUP_PAD  # [M] index among the seq's new tokens
    group = rows % GROUP_PAD
    row_valid = (tok < q_len) & (group < GROUP_SIZE)
    head = kv_head * GROUP_SIZE + group
    dims = tl.arange(0, HEAD_DIM_PAD)
    io_mask = row_valid[:, None] & (dims < HEAD_DIM)[None, :]
    q_off = (q_start + tok).to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :]
    q = tl.load(query_ptr + q_off, mask=io_mask, other=0.0)  # [M, DP]
    q_pos = context_len + tok
    kv_end = tl.minimum(seq_len, context_len + tl.minimum(q_len, (q_tile + 1) * BLOCK_Q))
    kv_start = 0
    if USE_WINDOW:
        kv_start = tl.maximum(context_len + q_tile * BLOCK_Q - sliding_window + 1, 0) // BLOCK_N * BLOCK_N
    if USE_CHUNK:  # keys before the tile's first chunk are masked for every row of the tile
        kv_start = tl.maximum(kv_start, (context_len + q_tile * BLOCK_Q) // chunk_size * chunk_size)
        kv_start = kv_start // BLOCK_N * BLOCK_N
    acc = tl.full([BLOCK_M, HEAD_DIM_PAD], 0.0, dtype=tl.float32)
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc, m_i, l_i = _attend_kv_range(
        q, q_pos, acc, m_i, l_i, kv_start, kv_end, block_tables_ptr + seq * stride_bt, key_cache_ptr,
        value_cache_ptr, kv_head, stride_cb, stride_cs, stride_ch, scale, softcap, sliding_window, chunk_size,
        HEAD_DIM, HEAD_DIM_PAD, BLOCK_SIZE, BLOCK_N, USE_WINDOW, USE_SOFTCAP, USE_CHUNK, DOT_PRECISION,
    )  # fmt: skip
    if USE_SINKS:  # each head's sink logit joins the denominator and adds nothing to the output
        sink = tl.load(sinks_ptr + head, mask=row_valid, other=-1.0e30).to(tl.float32)
        m_new = tl.maximum(m_i, sink)
        alpha = tl.exp2((m_i - m_new) * 1.4426950408889634)
        acc = acc * alpha[:, None]
        l_i = l_i * alpha + tl.exp2((sink - m_new) * 1.4426950408889634)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_off = (q_start + tok).to(tl.int64)[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :]
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=io_mask)


@triton.jit
def _decode_partition_kernel(
    query_ptr, key_cache_ptr, value_cache_ptr, part_acc_ptr, part_ml_ptr, block_tables_ptr,
    cu_seqlens_q_ptr, seq_lens_ptr,
    stride_qt, stride_qh, stride_cb, stride_cs, stride_ch, stride_bt,
    scale, softcap, sliding_window, chunk_size, num_heads, num_partitions,
    GROUP_SIZE: tl.constexpr, Q_ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, PARTITION_SIZE: tl.constexpr,
    USE_WINDOW: tl.constexpr, USE_SOFTCAP: tl.constexpr, USE_CHUNK: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Program (seq, kv_head, partition): unnormalized acc, max and sum over one slice of the context."""
    seq, kv_head, part = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    q_row = tl.load(cu_seqlens_q_ptr + seq)
    if tl.load(cu_seqlens_q_ptr + seq + 1) == q_row:  # no new token for this sequence
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    group = tl.arange(0, Q_ROWS)  # padded to >= 16 rows so tl.dot applies
    head = kv_head * GROUP_SIZE + group
    dims = tl.arange(0, HEAD_DIM_PAD)
    io_mask = (group < GROUP_SIZE)[:, None] & (dims < HEAD_DIM)[None, :]
    q_off = q_row.to(tl.int64) * stride_qt + head[:, None] * stride_qh + dims[None, :]
    q = tl.load(query_ptr + q_off, mask=io_mask, other=0.0)  # [Q_ROWS, DP]
    q_pos = tl.full([Q_ROWS], 0, dtype=tl.int32) + seq_len - 1
    kv_start = part * PARTITION_SIZE
    kv_end = tl.minimum(kv_start + PARTITION_SIZE, seq_len)
    if USE_WINDOW:  # the window start need not be tile-aligned: the mask handles the rest
        kv_start = tl.maximum(kv_start, seq_len - sliding_window)
    if USE_CHUNK:
        kv_start = tl.maximum(kv_start, (seq_len - 1) // chunk_size * chunk_size)
    acc = tl.full([Q_ROWS, HEAD_DIM_PAD], 0.0, dtype=tl.float32)
    m_i = tl.full([Q_ROWS], -1.0e30, dtype=tl.float32)
    l_i = tl.full([Q_ROWS], 0.0, dtype=tl.float32)
    acc, m_i, l_i = _attend_kv_range(
        q, q_pos, acc, m_i, l_i, kv_start, kv_end, block_tables_ptr + seq * stride_bt, key_cache_ptr,
        value_cache_ptr, kv_head, stride_cb, stride_cs, stride_ch, scale, softcap, sliding_window, chunk_size,
        HEAD_DIM, HEAD_DIM_PAD, BLOCK_SIZE, BLOCK_N, USE_WINDOW, USE_SOFTCAP, USE_CHUNK, DOT_PRECISION,
    )  # fmt: skip
    # part_acc: [S, H, P, D]; part_ml: [2, S, H, P] (max, sum)
    ml_off = (seq * num_heads + head) * num_partitions + part  # [Q_ROWS]
    tl.store(part_acc_ptr + ml_off[:, None] * HEAD_DIM + dims[None, :], acc, mask=io_mask)
    ml_total = tl.num_programs(0) * num_heads * num_partitions
    tl.store(part_ml_ptr + ml_off, m_i, mask=group < GROUP_SIZE)
    tl.store(part_ml_ptr + ml_total + ml_off, l_i, mask=group < GROUP_SIZE)


@triton.jit
def _decode_reduce_kernel(
    part_acc_ptr, part_ml_ptr, out_ptr, cu_seqlens_q_ptr, sinks_ptr, stride_ot, stride_oh, num_heads,
    num_partitions, HEAD_DIM: tl.constexpr, HEAD_DIM_PAD: tl.constexpr, PART_PAD: tl.constexpr,
    USE_SINKS: tl.constexpr,
):  # fmt: skip
    """Program (seq, head): merges the partitions' softmax states into the final output row."""
    seq, head = tl.program_id(0), tl.program_id(1)
    q_row = tl.load(cu_seqlens_q_ptr + seq)
    if tl.load(cu_seqlens_q_ptr + seq + 1) == q_row:
        return
    parts = tl.arange(0, PART_PAD)
    part_mask = parts < num_partitions
    dims = tl.arange(0, HEAD_DIM_PAD)
    ml_off = (seq * num_heads + head) * num_partitions + parts  # [P]
    ml_total = tl.num_programs(0) * num_heads * num_partitions
    m = tl.load(part_ml_ptr + ml_off, mask=part_mask, other=-1.0e30)
    sums = tl.load(part_ml_ptr + ml_total + ml_off, mask=part_mask, other=0.0)
    acc_mask = part_mask[:, None] & (dims < HEAD_DIM)[None, :]
    acc = tl.load(part_acc_ptr + ml_off[:, None] * HEAD_DIM + dims[None, :], mask=acc_mask, other=0.0)
    m_max = tl.max(m, 0)
    if USE_SINKS:
        sink = tl.load(sinks_ptr + head).to(tl.float32)
        m_max = tl.maximum(m_max, sink)
    w = tl.exp2((m - m_max) * 1.4426950408889634)  # [P]
    total = tl.sum(w * sums, 0)
    if USE_SINKS:
        total += tl.exp2((sink - m_max) * 1.4426950408889634)
    out = tl.sum(w[:, None] * acc, 0) / tl.where(total > 0, total, 1.0)  # [DP]
    o_off = q_row.to(tl.int64) * stride_ot + head * stride_oh + dims
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)


def write_kv_cache(
    key: torch.Tensor,  # [T, num_kv_heads, head_dim]
    value: torch.Tensor,  # [T, num_kv_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,  # [T] int64; negative slots are skipped
) -> None:
    _check_caches(key_cache, value_cache)
    num_kv_heads, head_dim = key_cache.shape[-2:]
    for name, t in (("key", key), ("value", value)):
        if t.dim() != 3 or t.shape[1:] != (num_kv_heads, head_dim) or t.stride(-1) != 1:
            raise ValueError(f"{name} must be [T, {num_kv_heads}, {head_dim}] with a unit last stride")
    if slot_mapping.dtype != torch.int64 or slot_mapping.shape != (key.shape[0],):
        raise ValueError("slot_mapping must be int64 of shape [T]")
    if key.shape[0] == 0:
        return
    num_elems = num_kv_heads * head_dim
    _write_kv_kernel[(key.shape[0],)](
        key, value, key_cache, value_cache, slot_mapping, key.stride(0), key.stride(1), value.stride(0),
        value.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        HEAD_DIM=head_dim, NUM_ELEMS=num_elems, BLOCK=triton.next_power_of_2(num_elems),
        BLOCK_SIZE=key_cache.shape[1],
    )  # fmt: skip


def paged_attention(
    query: torch.Tensor,  # [T, num_heads, head_dim]
    key_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    value_cache: torch.Tensor,
    meta: AttentionMetadata,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    partition_size: int = DEFAULT_PARTITION_SIZE,
    *,
    sinks: torch.Tensor | None = None,  # [num_heads]: a per-head logit in every softmax (gpt-oss)
    chunk_size: int | None = None,  # chunked local attention (Llama 4)
) -> torch.Tensor:  # [T, num_heads, head_dim]
    """Causal attention of each sequence's new tokens over its paged context (see the reference)."""
    _check_attention_inputs(query, key_cache, value_cache, meta, sliding_window, softcap)
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    masking = (sliding_window, chunk_size)
    if sinks is not None and (sinks.shape != (query.shape[1],) or sinks.device != query.device):
        raise ValueError(f"sinks must be [{query.shape[1]}] (one per query head) on {query.device}")
    out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    if query.shape[0] == 0 or meta.num_seqs == 0:
        return out
    if meta.is_decode_only:
        _decode(query, key_cache, value_cache, meta, out, scale, masking, softcap, partition_size, sinks)
    else:
        _prefill(query, key_cache, value_cache, meta, out, scale, masking, softcap, sinks)
    return out


def _kernel_options(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    masking: tuple[int | None, int | None],
    softcap: float | None,
) -> dict:
    """Constexprs shared by both attention kernels."""
    head_dim = query.shape[-1]
    return dict(
        GROUP_SIZE=query.shape[1] // key_cache.shape[2],
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_SIZE=key_cache.shape[1],
        USE_WINDOW=masking[0] is not None,
        USE_SOFTCAP=softcap is not None,
        USE_CHUNK=masking[1] is not None,
        DOT_PRECISION="ieee" if query.dtype == torch.float32 else "tf32",
    )


def _prefill(
    query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, meta: AttentionMetadata,
    out: torch.Tensor, scale: float, masking: tuple[int | None, int | None], softcap: float | None,
    sinks: torch.Tensor | None,
) -> None:  # fmt: skip
    opts = _kernel_options(query, key_cache, masking, softcap)
    sliding_window, chunk_size = masking
    group_pad = triton.next_power_of_2(opts["GROUP_SIZE"])
    block_m = max(64 if query.is_cuda else 16, group_pad)
    block_n = 64 if query.is_cuda else 16
    grid = (meta.num_seqs, triton.cdiv(meta.max_query_len, block_m // group_pad), key_cache.shape[2])
    _prefill_kernel[grid](
        query, key_cache, value_cache, out, meta.block_tables, meta.cu_seqlens_q, meta.seq_lens,
        query if sinks is None else sinks, query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2), meta.block_tables.stride(0),
        scale, softcap or 1.0, sliding_window or 0, chunk_size or 1,
        GROUP_PAD=group_pad, BLOCK_M=block_m, BLOCK_N=block_n, USE_SINKS=sinks is not None, **opts,
    )  # fmt: skip


def _decode(
    query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, meta: AttentionMetadata,
    out: torch.Tensor, scale: float, masking: tuple[int | None, int | None], softcap: float | None,
    partition_size: int, sinks: torch.Tensor | None,
) -> None:  # fmt: skip
    opts = _kernel_options(query, key_cache, masking, softcap)
    sliding_window, chunk_size = masking
    if partition_size < 16 or partition_size & (partition_size - 1):
        raise ValueError(f"partition_size must be a power of two >= 16, got {partition_size}")
    block_n = min(64 if query.is_cuda else 16, partition_size)
    num_seqs, (num_heads, head_dim) = meta.num_seqs, query.shape[1:]
    num_partitions = triton.cdiv(max(meta.max_seq_len, 1), partition_size)
    part_acc = torch.empty(
        num_seqs, num_heads, num_partitions, head_dim, dtype=torch.float32, device=query.device
    )
    part_ml = torch.empty(2, num_seqs, num_heads, num_partitions, dtype=torch.float32, device=query.device)
    _decode_partition_kernel[(num_seqs, key_cache.shape[2], num_partitions)](
        query, key_cache, value_cache, part_acc, part_ml, meta.block_tables, meta.cu_seqlens_q, meta.seq_lens,
        query.stride(0), query.stride(1), key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        meta.block_tables.stride(0), scale, softcap or 1.0, sliding_window or 0, chunk_size or 1, num_heads,
        num_partitions,
        Q_ROWS=max(16, triton.next_power_of_2(opts["GROUP_SIZE"])), BLOCK_N=block_n,
        PARTITION_SIZE=partition_size, **opts,
    )  # fmt: skip
    _decode_reduce_kernel[(num_seqs, num_heads)](
        part_acc, part_ml, out, meta.cu_seqlens_q, query if sinks is None else sinks, out.stride(0),
        out.stride(1), num_heads, num_partitions, HEAD_DIM=head_dim, HEAD_DIM_PAD=opts["HEAD_DIM_PAD"],
        PART_PAD=triton.next_power_of_2(num_partitions), USE_SINKS=sinks is not None,
    )  # fmt: skip


def _check_caches(key_cache: torch.Tensor, value_cache: torch.Tensor) -> None:
    if key_cache.dim() != 4 or key_cache.shape != value_cache.shape or key_cache.dtype != value_cache.dtype:
        raise ValueError(
            "key_cache and value_cache must both be [num_blocks, block_size, num_kv_heads, head_dim]"
        )
    if key_cache.stride() != value_cache.stride() or key_cache.stride(-1) != 1:
        raise ValueError("key_cache and value_cache must share strides and have a unit last stride")


def _check_attention_inputs(
    query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, meta: AttentionMetadata,
    sliding_window: int | None, softcap: float | None,
) -> None:  # fmt: skip
    _check_caches(key_cache, value_cache)
    if query.dtype not in _SUPPORTED_DTYPES or query.dtype != key_cache.dtype:
        raise ValueError(f"query and caches must share a dtype among {_SUPPORTED_DTYPES}, got {query.dtype}")
    if query.dim() != 3 or query.shape[-1] != key_cache.shape[-1] or query.stride(-1) != 1:
        raise ValueError(
            "query must be [T, num_heads, head_dim] with the caches' head_dim and a unit last stride"
        )
    if query.shape[1] % key_cache.shape[2]:
        raise ValueError("num_heads must be a multiple of num_kv_heads")
    for name in ("cu_seqlens_q", "seq_lens", "block_tables"):
        t = getattr(meta, name)
        if t.dtype != torch.int32 or t.device != query.device or t.stride(-1) != 1:
            raise ValueError(f"meta.{name} must be int32 on {query.device} with a unit last stride")
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window must be >= 1, got {sliding_window}")
    if softcap is not None and softcap <= 0:
        raise ValueError(f"softcap must be > 0, got {softcap}")
