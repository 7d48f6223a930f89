"""Paged decode attention on the CPU through a compiled kernel that reads the KV cache in place.

On the CPU, decode attention through SDPA first gathers every sequence's KV blocks into a dense,
padded tensor and then reads that copy again: more time than the model's matmuls on a GRPO-shaped
batch. The kernel (csrc/paged_decode_cpu.cpp) walks each sequence's block table instead, one work
item per (sequence, KV head), with an exact fp32 softmax. It is built on first use with torch's
cpp_extension (a C++ compiler is needed; the build is cached in torch's extension directory, one per
CPU capability). Without a compiler, or with ROLLOUT_CPU_DECODE_KERNEL=0, the SDPA path serves,
exactly, only slower; a failed build says so once.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rollout.ops.attention_metadata import AttentionMetadata

logger = logging.getLogger(__name__)

DISABLE_ENV = "ROLLOUT_CPU_DECODE_KERNEL"
_SOURCE = Path(__file__).parent / "csrc" / "paged_decode_cpu.cpp"
_CAPABILITY_FLAGS = {"AVX2": ["-mavx2", "-mfma"], "AVX512": ["-mavx512f", "-mavx2", "-mfma"]}

Kernel = Callable[..., None]


@functools.cache
def load_decode_kernel() -> Kernel | None:
    """The compiled `paged_decode`, or None when disabled or when it cannot be built here."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        capability = torch.backends.cpu.get_cpu_capability()
        flags = ["-O3", "-fopenmp", *_CAPABILITY_FLAGS.get(capability, [])]
        module = load(
            f"rollout_paged_decode_{capability.lower().replace(' ', '_')}",
            [str(_SOURCE)],
            extra_cflags=flags,
            extra_ldflags=["-fopenmp"],
        )
    except Exception as exc:  # no compiler, no headers: the SDPA path is exact too
        logger.warning("CPU paged decode kernel unavailable (%s); decode attention uses SDPA", exc)
        return None
    return module.paged_decode


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
    kernel: Kernel,
    query: torch.Tensor,  # [T, H, D] the packed batch
    key_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, D]
    value_cache: torch.Tensor,  # [num_blocks, block_size, Hkv, Dv]
    plan: DecodeRows,
    scale: float,
    masking: tuple[int | None, int | None],  # (sliding window, chunk size)
) -> torch.Tensor:  # [R, H, Dv], row r for plan sequence r
    q = query if plan.rows is None else query[plan.rows]
    out = q.new_empty(q.shape[0], q.shape[1], value_cache.shape[-1])
    kernel(
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
    kernel: Kernel | None, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor
) -> bool:
    """The kernel serves fp32 CPU caches laid out as the engine allocates them."""
    return (
        kernel is not None
        and query.device.type == "cpu"
        and query.dtype == key_cache.dtype == value_cache.dtype == torch.float32
        and key_cache.is_contiguous()
        and value_cache.is_contiguous()
    )
