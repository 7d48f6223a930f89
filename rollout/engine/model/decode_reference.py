"""The model's own decode, as transformers' `generate` runs it: the half-precision self-check's noise.

In bf16 a model's own two paths can differ by more than the dtype's noise bound at some tokens: Jamba's
Mamba mixer reads its fp32 state out in bf16 in its one-token update and in fp32 in its chunked scan (the
zoo's Jamba, one weight draw: 0.062 of the largest logit at one token of 29; the rest under 0.02). The
engine decodes through that update, as `generate` does, so that is not a departure from the model. When a
half-precision gap passes the bound nothing more runs; when it does not, each checked sequence is decoded
as `generate` decodes it (its first chunk whole, then one token at a time through transformers' own cache,
routers pinned), and a token passes when the engine is no further from the full forward than NOISE_FACTOR
times that decode is. fp32 never uses this: there the engine promises the full forward within 1e-4.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel

from rollout.engine.model.check_plan import FIRST_CHUNK, CheckPlan
from rollout.engine.model.pinned_routing import RoutingPin
from rollout.hf.attention_scope import set_engine_attention

NOISE_FACTOR = 2.0


def beyond_own_decode(
    gaps: list[torch.Tensor], own: list[torch.Tensor], tolerance: float
) -> list[tuple[int, int]]:
    """The (sequence, position) tokens whose gap exceeds both the bound and NOISE_FACTOR times the own
    decode's gap there (NaN included)."""
    return [
        (seq, pos)
        for seq, (gap, noise) in enumerate(zip(gaps, own, strict=True))
        for pos in range(gap.shape[0])
        if not (gap[pos] <= tolerance or gap[pos] <= NOISE_FACTOR * noise[pos])
    ]


@torch.inference_mode()
def generate_path_logits(model: PreTrainedModel, plan: CheckPlan, pin: RoutingPin) -> list[torch.Tensor]:
    """Each checked sequence's logits [len, vocab] (fp32) as `generate` computes them: the first chunk in
    one forward, then one token per forward on transformers' cache, eager attention."""
    device = next(model.parameters()).device
    names = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in names else "past_key_values"
    model.set_attn_implementation("eager")
    try:
        out = []
        for seq, ids in enumerate(plan.seqs):
            cache = DynamicCache(config=model.config.get_text_config())
            first = min(FIRST_CHUNK, len(ids))
            parts = []
            for start, end in [(0, first)] + [(p, p + 1) for p in range(first, len(ids))]:
                positions = torch.arange(start, end, device=device)[None]
                extra = {"position_ids": positions} if "position_ids" in names else {}
                with pin.replaying([(seq, p) for p in range(start, end)]):
                    logits = model(
                        input_ids=torch.tensor([ids[start:end]], device=device),
                        use_cache=True,
                        **{cache_arg: cache},
                        **extra,
                    ).logits[0]
                parts.append(logits.float())
            out.append(torch.cat(parts))
        return out
    finally:
        set_engine_attention(model)
