"""Temperature: each row's logits divided by its temperature, as the sampler and the trainer-side replay
(rollout/replay/) both compute it.

Greedy rows keep their logits; a temperature below 1 can overflow fp32 logits to +inf, hence the clamp
from above (an overflowed value becomes the largest finite one: still the extreme, never inf - inf = NaN).
Not from below: a banned or grammar-masked token's -inf must stay -inf (a finite floor made it look kept
in `kept_token_ids` and gave it a finite value in `top_logprobs`); a finite logit that overflows to -inf
had probability 0 in fp32 anyway.
"""

from __future__ import annotations

import torch

from rollout.engine.sample.truncation import row_column

_FP32_MAX = torch.finfo(torch.float32).max


def temperature_scaled(logits: torch.Tensor, rows: list, out: torch.Tensor | None = None) -> torch.Tensor:
    """logits: [R, vocab]. Returns `logits` itself when every row's temperature is 1 (or greedy), else
    logits / temperature per row, into `out` when given (the sampler's buffer; may be `logits`), else a
    new tensor (the replay's: autograd follows it)."""
    temps = [row.params.temperature if not row.params.greedy else 1.0 for row in rows]
    if all(t == 1.0 for t in temps):
        return logits
    scaled = torch.div(logits, row_column([min(t, _FP32_MAX) for t in temps], logits), out=out)
    return scaled.clamp_(max=_FP32_MAX) if min(temps) < 1.0 else scaled
