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
from collections.abc import Iterator

import torch
from transformers import PreTrainedModel

from rollout.engine.kv.kv_cache import KVCacheSpec
from rollout.engine.model import decode_reference, divergence
from rollout.engine.model.check_forwards import eager_logits, engine_logits, position_gaps
from rollout.engine.model.check_plan import KINDS, CheckPlan, check_plan
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.pinned_routing import RoutingPin
from rollout.ops.attention_backend import AttentionBackend

logger = logging.getLogger(__name__)
# fp32: the largest log-probability difference (any token of the vocabulary) the engine promises.
# fp16 / bf16: the largest logit difference relative to the largest reference logit (at least 1), noise; a
# token beyond it passes when the model's own decode is half as far there (decode_reference.py).
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}
_ONE_CHECK_AT_A_TIME = threading.Lock()


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
