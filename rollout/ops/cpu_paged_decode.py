"""Paged decode attention on the CPU through the compiled kernel, which reads the KV cache in place.

On the CPU, decode attention through SDPA first gathers every sequence's KV blocks into a dense,
padded tensor and then reads that copy again: more time than the model's matmuls on a GRPO-shaped
batch. The kernel (csrc/paged_decode_cpu.cpp, built by cpu_kernels.py) walks each sequence's block
table instead, with an exact fp32 softmax; consecutive rows whose tables begin with the same blocks (a
prompt's n samples) are served together, each shared key read once for all of them, with results
bit-identical to each row alone. This module plans its inputs once per step and says when it can serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import torch

from rollout.ops.attention_metadata import AttentionMetadata


@dataclass(slots=True)
class DecodeRows:
    """The decode sequences of a step as the kernel reads them, planned once per step."""

    rows: torch.Tensor | None  # [R] packed row of each sequence's query; None: rows 0..R-1 in order
    block_tables: torch.Tensor  # [R, max_blocks] int32, contiguous
    seq_lens: torch.Tensor  # [R] int64
    # by (sliding window, chunk size): [R] int64 first key each query may see
    starts: dict[tuple[int | None, int | None], torch.Tensor] = field(default_factory=dict)

    def first_keys(self, sliding_window: int | None, chunk_size: int | None) -> torch.Tensor:
        """A decode query sits at position len - 1: its window and its chunk are both key ranges."""
        key = (sliding_window, chunk_size)
        if key not in self.starts:
            start = torch.zeros_like(self.seq_lens)
            last = (self.seq_lens - 1).clamp(min=0)
            if sliding_window is not None:
                start = torch.maximum(start, last - sliding_window + 1)
            if chunk_size is not None:
                start = torch.maximum(start, last // chunk_size * chunk_size)
            self.starts[key] = start
        return self.starts[key]


def plan_decode_rows(meta: AttentionMetadata, seqs: list[int], in_order: bool) -> DecodeRows:
    """`seqs` are the decode sequences; `in_order` when they are the whole batch, one row each."""
    if in_order:
        return DecodeRows(None, meta.block_tables.int().contiguous(), meta.seq_lens.long())
    index = torch.tensor(seqs, device=meta.block_tables.device)
    return DecodeRows(
        rows=meta.cu_seqlens_q[index].long(),
        block_tables=meta.block_tables[index].int().contiguous(),
        seq_lens=meta.seq_lens[index].long(),
    )


def decode_attention(
    kernels: ModuleType,
    query: torch.Tensor,  # [T, H, D] the packed batch
    key_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, D]
    value_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, Dv]
    plan: DecodeRows,
    scale: float,
    masking: tuple[int | None, int | None],  # (sliding window, chunk size)
) -> torch.Tensor:  # [R, H, Dv], row r for plan sequence r
    q = query if plan.rows is None else query[plan.rows]
    out = q.new_empty(q.shape[0], q.shape[1], value_cache.shape[-1])
    kernels.paged_decode(
        out,
        q.contiguous(),
        key_cache,
        value_cache,
        plan.block_tables,
        plan.seq_lens,
        plan.first_keys(*masking),
        scale,
    )
    return out


def can_run(
    kernels: ModuleType | None, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor
) -> bool:
    """The kernel serves fp32 CPU caches laid out as the engine allocates them."""
    return (
        kernels is not None
        and query.device.type == "cpu"
        and query.dtype == key_cache.dtype == value_cache.dtype == torch.float32
        and key_cache.is_contiguous()
        and value_cache.is_contiguous()
    )
