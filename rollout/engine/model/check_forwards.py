"""The two forwards the self-check compares, and the gap between them.

`engine_logits`: the engine's forward over a check plan (prefill chunks, mixed batches, decode steps) on a
private paged cache with the engine's attention backend; `eager_logits`: the model's own full forward with
transformers' eager attention, what a trainer computes. The refusal's diagnosis runs both again
(divergence.py), so they live apart from the verdict (self_check.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from transformers import DynamicCache, PreTrainedModel

from rollout.engine.hybrid.recurrent_layers import Segment, recurrent_modules, segments, step_segments
from rollout.engine.kv.kv_cache import KVCacheSpec, allocate_kv_caches
from rollout.engine.model.check_plan import CheckPlan, Piece
from rollout.engine.model.derived_positions import derives_positions, position_inputs
from rollout.engine.model.pinned_routing import RoutingPin
from rollout.hf import attention as hf_attention
from rollout.hf.attention import ForwardContext
from rollout.hf.attention_scope import set_engine_attention
from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.attention_metadata import AttentionMetadata

StepObserver = Callable[[list[tuple[int, int]]], contextlib.AbstractContextManager]


def position_gaps(
    dtype: torch.dtype, got: list[torch.Tensor], want: list[torch.Tensor]
) -> list[torch.Tensor]:
    """Per checked sequence, per position, the gap TOLERANCE bounds (fp32 log-probabilities, else
    logits relative to the sequence's largest reference logit)."""
    if dtype == torch.float32:
        return [
            (g.log_softmax(-1) - w.log_softmax(-1)).abs().amax(-1) for g, w in zip(got, want, strict=True)
        ]
    return [(g - w).abs().amax(-1) / w.abs().max().clamp_min(1.0) for g, w in zip(got, want, strict=True)]


@torch.inference_mode()
def engine_logits(
    model: PreTrainedModel,
    spec: KVCacheSpec,
    backend: AttentionBackend,
    block_size: int,
    plan: CheckPlan,
    observers: list[StepObserver],
) -> list[torch.Tensor]:
    """Each checked sequence's logits [len, vocab] (fp32) as the engine computes them, step by step;
    every observer is entered around each step with the step's rows, (sequence, position) per token."""
    device = next(model.parameters()).device
    blocks_per_seq = -(-max(len(s) for s in plan.seqs) // block_size)
    kv_caches = allocate_kv_caches(spec, blocks_per_seq * len(plan.seqs), block_size, device)
    tables = [list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)) for i in range(len(plan.seqs))]
    out: list[list[torch.Tensor]] = [[] for _ in plan.seqs]
    derived = derives_positions(model)
    states = recurrent_states(model, len(plan.seqs))
    for batch in plan.steps:
        ids = [t for p in batch for t in plan.seqs[p.seq][p.start : p.end]]
        positions = [pos for p in batch for pos in range(p.start, p.end)]
        slots = [tables[p.seq][pos // block_size] * block_size + pos % block_size for p in batch
                 for pos in range(p.start, p.end)]  # fmt: skip
        meta = _metadata(batch, tables, slots, device)
        split = segments(meta.query_lens_cpu, [states[p.seq] for p in batch]) if states else None
        rows = [(p.seq, pos) for p in batch for pos in range(p.start, p.end)]
        with contextlib.ExitStack() as stack:
            stack.enter_context(hf_attention.forward_context(ForwardContext(kv_caches, meta, backend)))
            stack.enter_context(_split(split))
            for observe in observers:
                stack.enter_context(observe(rows))
            position_ids = torch.tensor([positions], device=device)
            logits = model(
                input_ids=torch.tensor([ids], device=device),
                position_ids=position_ids,
                use_cache=False,
                **position_inputs(derived, position_ids),
            ).logits[0]
        row = 0
        for p in batch:
            out[p.seq].append(logits[row : row + p.end - p.start].float())
            row += p.end - p.start
    return [torch.cat(parts) for parts in out]


def recurrent_states(model: PreTrainedModel, count: int) -> list[DynamicCache] | None:
    """Fresh recurrent states for each checked sequence of a hybrid model; None for other models."""
    if not recurrent_modules(model):
        return None
    return [DynamicCache(config=model.config.get_text_config()) for _ in range(count)]


def _split(split: list[Segment] | None) -> contextlib.AbstractContextManager:
    return step_segments(split) if split is not None else contextlib.nullcontext()


def _metadata(
    batch: list[Piece], tables: list[list[int]], slots: list[int], device: torch.device
) -> AttentionMetadata:
    query_lens = [p.end - p.start for p in batch]
    seq_lens = [p.end for p in batch]
    cu = [0]
    for q_len in query_lens:
        cu.append(cu[-1] + q_len)
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=torch.tensor([tables[p.seq] for p in batch], dtype=torch.int32, device=device),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=query_lens,
        seq_lens_cpu=seq_lens,
    )


@torch.inference_mode()
def eager_logits(
    model: PreTrainedModel,
    seqs: list[list[int]],
    pin: RoutingPin,
    observe: Callable[[int], contextlib.AbstractContextManager] | None = None,
    positions: bool = False,
) -> list[torch.Tensor]:
    """The model's own forward with transformers' eager attention, one sequence at a time (what a
    trainer computes); the routers' inputs are recorded for the engine's forward. `observe(seq)` is
    entered around each sequence's forward; `positions` passes position_ids 0..n-1 as the engine does."""
    device = next(model.parameters()).device
    model.set_attn_implementation("eager")
    try:
        out = []
        for i, s in enumerate(seqs):
            extra = {"position_ids": torch.arange(len(s), device=device)[None]} if positions else {}
            with pin.recording(), observe(i) if observe else contextlib.nullcontext():
                ids = torch.tensor([s], device=device)
                out.append(model(input_ids=ids, use_cache=False, **extra).logits[0].float())
        return out
    finally:
        set_engine_attention(model)
