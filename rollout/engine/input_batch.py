"""Turns a SchedulerOutput into the packed tensors one forward pass needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollout.engine.scheduler import SchedulerOutput
from rollout.ops.attention_metadata import AttentionMetadata
from rollout.ops.host_to_device import to_device


@dataclass(slots=True)
class ModelInputs:
    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    meta: AttentionMetadata
    logits_indices: torch.Tensor  # [R]: packed rows whose logits are sampled
    inputs_embeds: torch.Tensor | None = None  # [1, T, hidden]: on steps with image tokens (engine/vision/)

    def token_inputs(self) -> dict[str, torch.Tensor]:
        """The model's token input: the ids, or embeddings with image features in place."""
        if self.inputs_embeds is not None:
            return {"inputs_embeds": self.inputs_embeds}
        return {"input_ids": self.input_ids}


def prepare_inputs(sched: SchedulerOutput, block_size: int, device: torch.device) -> ModelInputs:
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    query_lens: list[int] = []
    seq_lens: list[int] = []
    logits_indices: list[int] = []
    for item in sched.scheduled:
        seq, start = item.seq, item.seq.num_computed_tokens
        table = seq.block_table
        if item.num_new_tokens == 1:  # a decode: the common row, without the slices and generators
            input_ids.append(seq.token_ids[start])
            positions.append(start)
            slots.append(table[start // block_size] * block_size + start % block_size)
            end = start + 1
        else:
            end = start + item.num_new_tokens
            input_ids.extend(seq.token_ids[start:end])
            positions.extend(range(start, end))
            slots.extend(table[p // block_size] * block_size + p % block_size for p in range(start, end))
        query_lens.append(item.num_new_tokens)
        seq_lens.append(end)
        if item.prompt_rows:  # positions whose logits give prompt logprobs (engine/output/prompt_logprobs.py)
            first = len(input_ids) - (end - item.prompt_rows.start)
            logits_indices.extend(range(first, first + len(item.prompt_rows)))
        if item.samples:
            logits_indices.append(len(input_ids) - 1)
    max_blocks = max(len(item.seq.block_table) for item in sched.scheduled)
    padding = [0] * max_blocks
    tables = [(t := item.seq.block_table) + padding[len(t) :] for item in sched.scheduled]
    cu_seqlens = [0]
    for q_len in query_lens:
        cu_seqlens.append(cu_seqlens[-1] + q_len)
    meta = AttentionMetadata(
        slot_mapping=to_device(slots, torch.int64, device),
        cu_seqlens_q=to_device(cu_seqlens, torch.int32, device),
        seq_lens=to_device(seq_lens, torch.int32, device),
        block_tables=to_device(tables, torch.int32, device),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=query_lens,
        seq_lens_cpu=seq_lens,
    )
    return ModelInputs(
        input_ids=to_device(input_ids, torch.int64, device)[None],
        position_ids=to_device(positions, torch.int64, device)[None],
        meta=meta,
        logits_indices=to_device(logits_indices, torch.int64, device),
    )
