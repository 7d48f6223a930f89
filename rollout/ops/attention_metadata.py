"""AttentionMetadata: what every paged-attention backend needs to know about one packed batch."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class AttentionMetadata:
    """Layout of a packed batch of S sequences holding T new tokens in total.

    Sequence s owns query rows cu_seqlens_q[s]:cu_seqlens_q[s+1]; its context after this step is
    seq_lens[s] tokens (the cached ones plus the new ones), so its j-th new token sits at position
    seq_lens[s] - query_len + j and attends causally to cache positions [0, that position].
    """

    slot_mapping: torch.Tensor  # [T] int64: cache slot (block_id * block_size + offset) of each new token
    cu_seqlens_q: torch.Tensor  # [S + 1] int32
    seq_lens: torch.Tensor  # [S] int32
    block_tables: torch.Tensor  # [S, max_blocks_per_seq] int32, padded with 0
    max_query_len: int
    max_seq_len: int  # an upper bound on seq_lens: exact when eager, max_model_len in a CUDA graph
    # Host copies, so the torch reference can split the batch without a device sync. A CUDA-graph
    # decode batch (one token per row) puts the bound max_seq_len here, since replays change the
    # lengths; its padding rows have seq_lens 0 on the device and attend to nothing.
    query_lens_cpu: list[int]
    seq_lens_cpu: list[int]

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def is_decode_only(self) -> bool:
        return self.max_query_len == 1
