"""DecodeBuffers: fixed-address inputs of a decode step, padded to a batch-size bucket.

A CUDA graph replays its kernels on the addresses it was captured with, so a graphed decode step
copies its inputs into these buffers instead of building fresh tensors. Rows past the real batch
are padding: token 0 at position 0, a context of length 0 (attention reads nothing and returns
zeros) and a K/V write to the scratch slot, which lies outside every block the allocator hands out.
"""

from __future__ import annotations

import torch

from rollout.engine.scheduler import SchedulerOutput
from rollout.ops.attention_metadata import AttentionMetadata
from rollout.ops.host_to_device import copy_to


class DecodeBuffers:
    def __init__(
        self, max_batch: int, max_model_len: int, block_size: int, scratch_slot: int, device: torch.device
    ) -> None:
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.scratch_slot = scratch_slot
        # input_ids, positions and slot_mapping share one buffer so a step loads them in one copy
        self._int64 = torch.zeros(3, max_batch, dtype=torch.int64, device=device)
        self.input_ids, self.positions, self.slot_mapping = self._int64.unbind(0)
        self.seq_lens = torch.zeros(max_batch, dtype=torch.int32, device=device)
        max_blocks = -(-max_model_len // block_size)
        # [max_batch, max_blocks]; columns past a row's own blocks may hold stale ids of other blocks,
        # which attention never reads: it stops at seq_lens.
        self.block_tables = torch.zeros(max_batch, max_blocks, dtype=torch.int32, device=device)
        self.cu_seqlens_q = torch.arange(max_batch + 1, dtype=torch.int32, device=device)  # 1 token per row
        self.pad_all()

    def metadata(self, batch: int) -> AttentionMetadata:
        """Views of the first `batch` rows. The host-side lengths are the bound max_model_len, since the
        real ones change at every replay; the device-side seq_lens are exact."""
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:batch],
            cu_seqlens_q=self.cu_seqlens_q[: batch + 1],
            seq_lens=self.seq_lens[:batch],
            block_tables=self.block_tables[:batch],
            max_query_len=1,
            max_seq_len=self.max_model_len,
            query_lens_cpu=[1] * batch,
            seq_lens_cpu=[self.max_model_len] * batch,
        )

    def pad_all(self) -> None:
        """Every row becomes padding: what capture runs on, so it writes only the scratch slot."""
        self._int64[:2].zero_()
        self.slot_mapping.fill_(self.scratch_slot)
        self.seq_lens.zero_()

    def load(self, sched: SchedulerOutput, batch: int) -> None:
        """Copies a pure-decode step's rows in and turns rows [num_seqs, batch) into padding."""
        bs = self.block_size
        pad = batch - len(sched.scheduled)
        ids, positions, slots, tables = [], [], [], []
        for item in sched.scheduled:
            seq, pos = item.seq, item.seq.num_computed_tokens
            ids.append(seq.token_ids[pos])
            positions.append(pos)
            slots.append(seq.block_table[pos // bs] * bs + pos % bs)
            tables.append(seq.block_table)
        copy_to(
            self._int64[:, :batch],
            [ids + [0] * pad, positions + [0] * pad, slots + [self.scratch_slot] * pad],
        )
        copy_to(self.seq_lens[:batch], [p + 1 for p in positions] + [0] * pad)
        width = max(len(table) for table in tables)
        copy_to(self.block_tables[: len(tables), :width], [t + [0] * (width - len(t)) for t in tables])
