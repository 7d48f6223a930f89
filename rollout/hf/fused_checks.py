"""When a fused CPU forward may serve a call, and when its probe accepts it.

Shared by fused_modules.py and fused_attention.py: a fused forward serves only while the engine runs
the model, on fp32 CPU inputs and weights, with no gradient to record (the kernels have no backward);
a module gets one only when, on a probe, it gives the module's own output within float rounding.
"""

from __future__ import annotations

import torch

from rollout.hf import attention as hf_attention

# Largest difference a probe accepts, relative to the largest output: float rounding of a reduction
# in another order, far below anything a formula difference (a weight offset, another epsilon) gives.
PROBE_TOLERANCE = 1e-5


def engaged(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a fused forward serves a call on `x` with a module whose weights are like `weight`."""
    return (
        hf_attention.in_forward_context()
        and x.dtype == weight.dtype == torch.float32
        and x.device.type == "cpu"
        and not (x.requires_grad and torch.is_grad_enabled())
    )


def reproduced(got: torch.Tensor, want: object) -> bool:
    """Whether a probe's fused output `got` is the module's own output `want` within PROBE_TOLERANCE."""
    if not isinstance(want, torch.Tensor) or want.shape != got.shape or not torch.isfinite(want).all():
        return False
    return bool((got - want).abs().max() <= PROBE_TOLERANCE * want.abs().max().clamp_min(1.0))
