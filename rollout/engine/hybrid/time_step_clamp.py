"""A Mamba2 mixer's time-step limit, kept on its one-token path as its chunked scan keeps it.

transformers' Mamba2 mixers clamp dt = softplus(dt_proj + dt_bias) to `time_step_limit` in their chunked
scan (a prefill, and a trainer's full forward) but not in their one-token update (decode). Nemotron-H and
Zamba2 set the limit to (time_step_min, inf): wherever dt falls under time_step_min the two paths differ,
and decoding through the update would not equal the trainer's forward. softplus is increasing, so
clamping its input to the preimage of the limit gives the clamped dt: while a mixer runs a one-token
update for the engine, a forward hook clamps the dt columns of its input projection to that preimage.
The model's own code runs unchanged; only a value it is fed differs, to the one its chunked scan uses.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
from torch import nn

# The Mamba2 mixers the engine runs, each checked to split its input projection as (gate, x|B|C, dt),
# dt last, into softplus(dt + dt_bias) (Falcon-H1 multiplies the projection by `mup_vector` first), and to
# clamp to `time_step_limit` in its chunked scan only (transformers 5.24).
MAMBA2_MIXERS = frozenset(
    {
        "Mamba2Mixer",
        "BambaMixer",
        "GraniteMoeHybridMambaLayer",
        "FalconH1Mixer",
        "NemotronHMamba2Mixer",
        "Zamba2MambaMixer",
    }
)


class TimeStepClamp:
    """Clamps the dt columns of `mixer.in_proj`'s output while `one_token()` is active."""

    def __init__(self, mixer: nn.Module, low: float, high: float) -> None:
        self.mixer, self.active = mixer, False
        # softplus's preimage of the limit; softplus(u) is u above 20 (torch's threshold)
        self.low = low + math.log(-math.expm1(-low)) if low > 0 else -math.inf
        self.high = high if high > 20 else high + math.log(-math.expm1(-high))
        mixer.in_proj.register_forward_hook(self._clamp)

    @contextlib.contextmanager
    def one_token(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def _clamp(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if not self.active:
            return
        low, high = self.bounds(output.dtype, output.device)
        heads = low.shape[0]
        output[..., -heads:].clamp_(min=low, max=high)  # a fresh tensor of the projection's, in place

    def bounds(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Per head, the dt column's bounds: (preimage - dt_bias) / multiplier (read now: weights change)."""
        bias = self.mixer.dt_bias.detach().double()
        scale = _dt_multiplier(self.mixer, bias.shape[0])
        low, high = (self.low - bias) / scale, (self.high - bias) / scale
        return low.to(device=device, dtype=dtype), high.to(device=device, dtype=dtype)


def time_step_clamp(module: nn.Module) -> TimeStepClamp | None:
    """The clamp `module`'s one-token path needs; None when it has none to keep (not a Mamba2 mixer, or
    the default limit (0, inf), which softplus keeps by itself)."""
    if type(module).__name__ not in MAMBA2_MIXERS or getattr(module, "time_step_limit", None) is None:
        return None
    low, high = (float(v) for v in module.time_step_limit)
    if low <= 0 and high == math.inf:
        return None
    scale = _dt_multiplier(module, module.dt_bias.shape[0])
    if not bool((scale > 0).all()):
        raise ValueError(
            f"{type(module).__name__} (layer {module.layer_idx}): time_step_limit {module.time_step_limit} with a "
            "time-step multiplier that is not positive (mup_vector); the engine cannot keep the limit on decode"
        )
    return TimeStepClamp(module, low, high)


def _dt_multiplier(mixer: nn.Module, heads: int) -> torch.Tensor:
    """What the dt columns are multiplied by before dt_bias is added (Falcon-H1's mup_vector; else 1)."""
    mup = getattr(mixer, "mup_vector", None)
    if mup is None:
        return torch.ones(heads, dtype=torch.float64, device=mixer.dt_bias.device)
    return mup.detach().reshape(-1)[-heads:].double().to(mixer.dt_bias.device)
