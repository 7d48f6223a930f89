"""The self-check: a few random sequences through the engine's forward against the model's own eager one.

It runs prefill chunks, mixed batches and decode steps over a private paged cache, with the engine's
attention backend, and refuses the model (naming its type and the measured difference) when the
logits disagree beyond the dtype's numerical noise. Static checks cannot see every way a model can
depart from what the engine implements; this catches the rest before anything is served. Mixture-of-
experts routers see the reference forward's inputs in both runs (pinned_routing.py): a near-tied expert
choice that flips under bf16 noise is not a departure from the model.
"""

from __future__ import annotations

import contextlib
import logging

import torch
from transformers import DynamicCache, PreTrainedModel

from rollout.engine.hybrid.recurrent_layers import Segment, recurrent_modules, segments, step_segments
from rollout.engine.kv_cache import KVCacheSpec, LayerKV, allocate_kv_caches
from rollout.engine.model.derived_positions import derives_positions, position_inputs
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.pinned_routing import RoutingPin
from rollout.engine.model_runner import ModelRunner
from rollout.hf import attention as hf_attention
from rollout.hf.attention import ForwardContext
from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.attention_metadata import AttentionMetadata

logger = logging.getLogger(__name__)
# Largest logit difference accepted, relative to the largest reference logit (at least 1).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def run_self_check(
    model: PreTrainedModel,
    spec: KVCacheSpec,
    backend: AttentionBackend,
    block_size: int,
    max_model_len: int | None = None,
    seed: int = 0,
) -> float:
    """Returns the measured relative difference; raises UnsupportedModelError beyond TOLERANCE."""
    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().num_embeddings
    limit = max(2, max_model_len or 2 * block_size + 3)  # never past the context the engine will serve
    lengths = (min(2 * block_size + 3, limit), min(block_size + 2, limit))
    generator = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]
    name = f"{type(model).__name__} (model_type {model.config.get_text_config().model_type!r})"
    logger.info("self-check: the engine's forward against %s's own, %d sequences", name, len(seqs))
    pin = RoutingPin(model)
    want = _eager_logits(model, seqs, device, pin)
    try:
        got = _engine_logits(model, spec, backend, block_size, seqs, device, pin)
    except Exception as exc:  # whatever breaks, the model is refused with the cause, never crashes the load
        raise UnsupportedModelError(
            f"{name} fails in the engine's forward ({type(exc).__name__}: {exc})"
        ) from exc
    err = max(
        ((g - w).abs().max() / w.abs().max().clamp_min(1.0)).item() for g, w in zip(got, want, strict=True)
    )
    tolerance = TOLERANCE.get(model.dtype, 5e-2)
    if not err <= tolerance:  # also refuses NaN
        raise UnsupportedModelError(
            f"{name}: the engine's logits differ from the model's own forward by {err:.3g} (relative to the "
            f"largest logit; noise in {str(model.dtype).removeprefix('torch.')} is below {tolerance:g}); "
            "the engine cannot run this model exactly"
        )
    return err


def check_runner(runner: ModelRunner, max_model_len: int | None = None) -> float:
    """The self-check for a live engine (e.g. after a weight update): its model, backend and cache shapes."""
    layers = tuple(LayerKV(k.shape[2], k.shape[3], v.shape[3]) for k, v in runner.kv_caches)
    spec = KVCacheSpec(layers, runner.kv_caches[0][0].dtype)
    return run_self_check(runner.model, spec, runner.backend, runner.block_size, max_model_len)


def _chunks(length: int) -> list[tuple[int, int]]:
    """A prefill chunk, a second chunk, then decode steps: every batch kind the scheduler makes."""
    first, second = min(3, length - 2), length - 2
    return [(0, first), (first, second), (second, second + 1), (second + 1, length)]


@torch.inference_mode()
def _engine_logits(
    model: PreTrainedModel,
    spec: KVCacheSpec,
    backend: AttentionBackend,
    block_size: int,
    seqs: list[list[int]],
    device: torch.device,
    pin: RoutingPin,
) -> list[torch.Tensor]:
    blocks_per_seq = -(-max(len(s) for s in seqs) // block_size)
    kv_caches = allocate_kv_caches(spec, blocks_per_seq * len(seqs), block_size, device)
    tables = [list(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)) for i in range(len(seqs))]
    out: list[list[torch.Tensor]] = [[] for _ in seqs]
    plans = [_chunks(len(s)) for s in seqs]
    derived = derives_positions(model)
    states = recurrent_states(model, len(seqs))
    for step in range(max(len(p) for p in plans)):
        batch = [(i, *plans[i][step]) for i in range(len(seqs)) if step < len(plans[i])]
        batch = [(i, start, end) for i, start, end in batch if end > start]
        ids, positions, slots = [], [], []
        for i, start, end in batch:
            ids += seqs[i][start:end]
            positions += range(start, end)
            slots += [tables[i][p // block_size] * block_size + p % block_size for p in range(start, end)]
        meta = _metadata(batch, tables, slots, device)
        split = segments(meta.query_lens_cpu, [states[i] for i, _, _ in batch]) if states else None
        rows = [(i, p) for i, start, end in batch for p in range(start, end)]
        with (
            hf_attention.forward_context(ForwardContext(kv_caches, meta, backend)),
            _split(split),
            pin.replaying(rows),
        ):
            position_ids = torch.tensor([positions], device=device)
            logits = (
                model(
                    input_ids=torch.tensor([ids], device=device),
                    position_ids=position_ids,
                    use_cache=False,
                    **position_inputs(derived, position_ids),
                )
                .logits[0]
                .float()
            )
        row = 0
        for i, start, end in batch:
            out[i].append(logits[row : row + end - start])
            row += end - start
    return [torch.cat(parts) for parts in out]


def recurrent_states(model: PreTrainedModel, count: int) -> list[DynamicCache] | None:
    """Fresh recurrent states for each checked sequence of a hybrid model; None for other models."""
    if not recurrent_modules(model):
        return None
    return [DynamicCache(config=model.config.get_text_config()) for _ in range(count)]


def _split(split: list[Segment] | None) -> contextlib.AbstractContextManager:
    return step_segments(split) if split is not None else contextlib.nullcontext()


def _metadata(
    batch: list[tuple[int, int, int]], tables: list[list[int]], slots: list[int], device: torch.device
) -> AttentionMetadata:
    query_lens = [end - start for _, start, end in batch]
    seq_lens = [end for _, _, end in batch]
    cu = [0]
    for q_len in query_lens:
        cu.append(cu[-1] + q_len)
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_tables=torch.tensor([tables[i] for i, _, _ in batch], dtype=torch.int32, device=device),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        query_lens_cpu=query_lens,
        seq_lens_cpu=seq_lens,
    )


@torch.inference_mode()
def _eager_logits(
    model: PreTrainedModel, seqs: list[list[int]], device: torch.device, pin: RoutingPin
) -> list[torch.Tensor]:
    """The model's own forward with transformers' eager attention, one sequence at a time; the routers'
    inputs are recorded for the engine's forward."""
    model.set_attn_implementation("eager")
    try:
        out = []
        for s in seqs:
            with pin.recording():
                out.append(
                    model(input_ids=torch.tensor([s], device=device), use_cache=False).logits[0].float()
                )
        return out
    finally:
        model.set_attn_implementation(hf_attention.ATTN_IMPLEMENTATION)
