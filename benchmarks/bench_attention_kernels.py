"""GPU micro-benchmark of the paged-attention kernels: Triton vs the torch reference, median of do_bench.

Decode at batch 1/64/256 over 1k-4k contexts and one 2048-token prefill chunk after a 2048-token
context, bf16, Llama-8B-like heads (32 query heads, 8 KV heads, head_dim 128, 16-token blocks).
Not a test: run it by hand on a CUDA machine, `python benchmarks/bench_attention_kernels.py`.
"""

from __future__ import annotations

import sys

import torch

from rollout.ops import paged_attention_ref as ref
from rollout.ops.attention_metadata import AttentionMetadata

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, BLOCK_SIZE = 32, 8, 128, 16
# (name, batch size, context length after the step, new tokens per sequence)
CASES = [
    ("decode", 1, 1024, 1),
    ("decode", 1, 4096, 1),
    ("decode", 64, 1024, 1),
    ("decode", 64, 4096, 1),
    ("decode", 256, 1024, 1),
    ("decode", 256, 4096, 1),
    ("prefill", 1, 4096, 2048),
]


def make_batch(batch: int, seq_len: int, q_len: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """A packed batch whose sequences own disjoint, shuffled blocks of one pool."""
    blocks_per_seq = -(-seq_len // BLOCK_SIZE)
    num_blocks = batch * blocks_per_seq
    key_cache = torch.randn(num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    value_cache = torch.randn_like(key_cache)
    block_tables = torch.randperm(num_blocks, device="cuda").view(batch, blocks_per_seq).int()
    meta = AttentionMetadata(
        slot_mapping=torch.zeros(batch * q_len, dtype=torch.int64, device="cuda"),  # unused by attention
        cu_seqlens_q=torch.arange(0, (batch + 1) * q_len, q_len, device="cuda", dtype=torch.int32),
        seq_lens=torch.full((batch,), seq_len, device="cuda", dtype=torch.int32),
        block_tables=block_tables,
        max_query_len=q_len,
        max_seq_len=seq_len,
        query_lens_cpu=[q_len] * batch,
        seq_lens_cpu=[seq_len] * batch,
    )
    query = torch.randn(batch * q_len, NUM_HEADS, HEAD_DIM, device="cuda", dtype=dtype)
    return query, key_cache, value_cache, meta


def bench_case(batch: int, seq_len: int, q_len: int) -> tuple[float, float, float]:
    """Median ms of Triton and of the reference, and the max abs difference of their outputs."""
    import triton.testing

    from rollout.ops import triton_attention as tri

    args = (*make_batch(batch, seq_len, q_len, torch.bfloat16), HEAD_DIM**-0.5)
    out_tri, out_ref = tri.paged_attention(*args), ref.paged_attention(*args)
    max_diff = (out_tri.float() - out_ref.float()).abs().max().item()
    ms_tri = triton.testing.do_bench(lambda: tri.paged_attention(*args), return_mode="median")
    ms_ref = triton.testing.do_bench(lambda: ref.paged_attention(*args), return_mode="median")
    return ms_tri, ms_ref, max_diff


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit(
            "bench_attention_kernels needs a CUDA GPU (the Triton kernels are timed compiled, not interpreted)"
        )
    print(
        f"{torch.cuda.get_device_name()}, bf16, H={NUM_HEADS} Hkv={NUM_KV_HEADS} D={HEAD_DIM} block={BLOCK_SIZE}"
    )
    print(
        f"{'case':>8} {'batch':>6} {'ctx':>6} {'q_len':>6} {'triton ms':>10} {'ref ms':>10} {'speedup':>8} {'max|diff|':>10}"
    )
    for name, batch, seq_len, q_len in CASES:
        ms_tri, ms_ref, diff = bench_case(batch, seq_len, q_len)
        print(
            f"{name:>8} {batch:>6} {seq_len:>6} {q_len:>6} {ms_tri:>10.3f} {ms_ref:>10.3f} "
            f"{ms_ref / ms_tri:>7.1f}x {diff:>10.2e}"
        )


if __name__ == "__main__":
    main()
