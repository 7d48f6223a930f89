"""Prefill chunks that end on block boundaries, where a hybrid model's states can be snapshotted.

A snapshot is taken between steps (state_snapshots.py), so it exists only where a step's chunk ends.
With prefix caching on a hybrid model the scheduler ends a chunk at the last boundary a later prompt
sharing these tokens can hit (a hit always leaves a token to compute), and a chunk cut by the token
budget at the last boundary inside it; a prompt that fits one step thus takes two (the tail after).
"""

from __future__ import annotations


def aligned_chunk(num_computed: int, num_new: int, num_tokens: int, block_size: int) -> int:
    """How many of `num_new` tokens (from `num_computed`, out of `num_tokens`) to compute this step."""
    end = num_computed + num_new
    last_hit = (num_tokens - 1) // block_size * block_size
    if num_computed < last_hit < end:
        return last_hit - num_computed
    if end < num_tokens:
        boundary = end // block_size * block_size
        if boundary > num_computed:
            return boundary - num_computed
    return num_new
