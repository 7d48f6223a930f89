"""The self-check: a few random sequences through the engine's forward against the model's own eager one.

It runs prefill chunks, mixed batches and, mostly, decode steps over a private paged cache, with the
engine's attention backend (check_plan.py), and refuses the model when it disagrees with the full
forward a trainer computes: in fp32 by more than the engine promises (1e-4 on any log-probability), in
fp16 / bf16 beyond the dtype's noise. A refusal names the model, the gap, the kind of step it shows in
and where in the model it starts (divergence.py). Static checks cannot see every way a model can depart
from what the engine implements; this catches the rest before anything is served. Mixture-of-experts
routers see the reference forward's inputs in both runs (pinned_routing.py): a near-tied expert choice
that flips under bf16 noise is not a departure from the model.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from collections.abc import Callable, Iterator

import torch
from transformers import DynamicCache, PreTrainedModel

from rollout.engine.hybrid.recurrent_layers import Segment, recurrent_modules, segments, step_segments
from rollout.engine.kv_cache import KVCacheSpec, LayerKV, allocate_kv_caches
from rollout.engine.model import decode_reference
from rollout.engine.model.check_plan import KINDS, CheckPlan, Piece, check_plan
from rollout.engine.model.derived_positions import derives_positions, position_inputs
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.pinned_routing import RoutingPin
from rollout.engine.model_runner import ModelRunner
from rollout.hf import attention as hf_attention
from rollout.hf.attention import ForwardContext
from rollout.ops.attention_backend import AttentionBackend
from rollout.ops.attention_metadata import AttentionMetadata

logger = logging.getLogger(__name__)
# fp32: the largest log-probability difference (any token of the vocabulary) the engine promises.
# fp16 / bf16: the largest logit difference relative to the largest reference logit (at least 1), noise; a
# token beyond it passes when the model's own decode is half as far there (decode_reference.py).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}
_ONE_CHECK_AT_A_TIME = threading.Lock()
StepObserver = Callable[[list[tuple[int, int]]], contextlib.AbstractContextManager]


def run_self_check(
    model: PreTrainedModel,
    spec: KVCacheSpec,
    backend: AttentionBackend,
    block_size: int,
    max_model_len: int | None = None,
    seed: int = 0,
) -> float:
    """Returns the measured gap (see TOLERANCE); raises UnsupportedModelError beyond TOLERANCE (in fp16 /
    bf16, unless the model's own decode is as far at those tokens: decode_reference.py)."""
    from rollout.engine.model import divergence  # it runs the forwards below again

    vocab = model.get_input_embeddings().num_embeddings
    plan = check_plan(vocab, block_size, max_model_len, seed)
    logger.info(
        "self-check: the engine's forward against %s's own, %d sequences", model_name(model), len(plan.seqs)
    )
    with deterministic_threads():
        pin = RoutingPin(model)
        want = eager_logits(model, plan.seqs, pin)
        # whatever breaks, the model is refused with the cause, never crashes the load
        try:
            got = engine_logits(model, spec, backend, block_size, plan, [pin.replaying])
        except Exception as exc:
            raise UnsupportedModelError(
                f"{model_name(model)} fails in the engine's forward ({type(exc).__name__}: {exc})"
            ) from exc
        gaps = position_gaps(model.dtype, got, want)
        gap = max(g.max().item() for g in gaps)
        tolerance = TOLERANCE.get(model.dtype, TOLERANCE[torch.bfloat16])
        if not gap <= tolerance and not _within_own_decode(model, plan, pin, want, gaps, tolerance):
            cause = divergence.diagnose(model, spec, backend, block_size, plan, got, tolerance)
            raise UnsupportedModelError(
                f"{model_name(model)}: the engine's {_measure(model.dtype)} differ from the model's own forward "
                f"by {gap:.3g} ({_by_kind(plan, gaps)}; {_bound(model.dtype, tolerance)}); {cause}; the "
                "engine cannot run this model exactly"
            )
    return gap


def check_runner(runner: ModelRunner, max_model_len: int | None = None) -> float:
    """The self-check for a live engine (e.g. after a weight update): its model, backend and cache shapes."""
    layers = tuple(LayerKV(k.shape[2], k.shape[3], v.shape[3]) for k, v in runner.kv_caches)
    spec = KVCacheSpec(layers, runner.kv_caches[0][0].dtype)
    return run_self_check(runner.model, spec, runner.backend, runner.block_size, max_model_len)


def model_name(model: PreTrainedModel) -> str:
    return f"{type(model).__name__} (model_type {model.config.get_text_config().model_type!r})"


@contextlib.contextmanager
def deterministic_threads() -> Iterator[None]:
    """One CPU thread while checking: the verdict must not move with the machine's thread count (a
    reduction split over threads rounds differently in bf16); GPU kernels are unaffected. torch's count is
    the process's: checks run one at a time, so two engines loading at once give back what was set."""
    with _ONE_CHECK_AT_A_TIME:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


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


def _within_own_decode(
    model: PreTrainedModel,
    plan: CheckPlan,
    pin: RoutingPin,
    want: list[torch.Tensor],
    gaps: list[torch.Tensor],
    tolerance: float,
) -> bool:
    """fp16 / bf16 only: every token beyond the bound is within NOISE_FACTOR of the model's own decode's
    gap there (decode_reference.py). That decode passes position_ids 0..n-1 as `generate` does, so it only
    counts for a model whose full forward is the same given those ids (RoBERTa's is not); a model whose own
    decode cannot run is judged by the bound alone."""
    if model.dtype == torch.float32:
        return False
    try:
        if "position_ids" in inspect.signature(model.forward).parameters:
            numbered = eager_logits(model, plan.seqs, RoutingPin(model), positions=True)
            if not max(g.max().item() for g in position_gaps(model.dtype, numbered, want)) <= tolerance:
                return False
        own = position_gaps(model.dtype, decode_reference.generate_path_logits(model, plan, pin), want)
    except Exception:  # any failure (a cache the model does not take) leaves the plain verdict
        return False
    return not decode_reference.beyond_own_decode(gaps, own, tolerance)


def _measure(dtype: torch.dtype) -> str:
    return "log-probabilities" if dtype == torch.float32 else "logits"


def _bound(dtype: torch.dtype, tolerance: float) -> str:
    if dtype == torch.float32:
        return f"the engine promises {tolerance:g} in float32"
    return (
        f"relative to the largest logit; noise in {str(dtype).removeprefix('torch.')} is below {tolerance:g}, or "
        f"{decode_reference.NOISE_FACTOR:g} times the model's own decode's gap at the token (as `generate` runs it)"
    )


def _by_kind(plan: CheckPlan, gaps: list[torch.Tensor]) -> str:
    """The largest gap on each kind of step: '<kind>s <gap>, ...' (NaN shows as nan)."""
    values: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for seq, gap in enumerate(gaps):
        for kind, value in zip(plan.kinds(seq), gap.tolist(), strict=True):
            values[kind].append(value)
    worst = {kind: torch.tensor(v).max().item() for kind, v in values.items() if v}
    return ", ".join(f"{kind}s {value:.3g}" for kind, value in worst.items())


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
        model.set_attn_implementation(hf_attention.ATTN_IMPLEMENTATION)
