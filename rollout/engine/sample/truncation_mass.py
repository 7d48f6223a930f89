"""What the truncation filters (top-k, top-p, min-p) kept, per sampled row: its probability mass, its ids.

"processed" logprobs are renormalised over the kept tokens, so they differ from the untruncated
temperature-scaled logprobs a trainer recomputes by exactly log(kept mass). Returning that term
lets a trainer's importance-sampling correction compare like with like (TRL issue #6789).
"""

from __future__ import annotations

from math import inf

import torch

from rollout.ops.workspace import Workspace


def kept_log_mass(scaled: torch.Tensor, truncated: torch.Tensor, workspace: Workspace) -> torch.Tensor:
    """log(sum of softmax(scaled) over the tokens `truncated` kept), per row: [R] fp32, <= 0.

    scaled: [R, vocab] logits after penalties and temperature; truncated: the same with every
    dropped token at -inf. A row the filters left whole gets exactly 0. The [R, vocab] temporaries
    live in `workspace` (torch.logsumexp and torch.isfinite would allocate five per step).
    """
    if truncated is scaled:
        return torch.zeros(scaled.shape[0], dtype=torch.float32, device=scaled.device)
    kept = logsumexp(truncated.float(), workspace) - logsumexp(scaled.float(), workspace)
    # the bans (-inf before truncation) are part of `scaled`: only tokens the filters dropped count
    finite = _finite(truncated, workspace, "finite truncated")
    untouched = torch.eq(finite, _finite(scaled, workspace, "finite scaled"), out=finite).all(dim=-1)
    return torch.where(untouched, torch.zeros_like(kept), kept.clamp(max=0.0))


def logsumexp(values: torch.Tensor, workspace: Workspace) -> torch.Tensor:
    """torch.logsumexp(values, dim=-1) bit for bit (its own steps: shift by the finite row max, exp,
    sum, log, shift back), the shifted exponentials in the workspace instead of a fresh tensor."""
    maxes = values.amax(dim=-1, keepdim=True)
    maxes.masked_fill_(maxes.abs() == inf, 0.0)
    shifted = torch.sub(values, maxes, out=_buffer(workspace, "shifted", values, values.dtype)).exp_()
    return shifted.sum(dim=-1).log_().add_(maxes[:, 0])


def _finite(values: torch.Tensor, workspace: Workspace, name: str) -> torch.Tensor:
    """torch.isfinite(values), [R, vocab] bool, through |x| < inf (False for inf and NaN)."""
    magnitude = torch.abs(values, out=_buffer(workspace, "magnitude", values, values.dtype))
    return torch.lt(magnitude, inf, out=_buffer(workspace, name, values, torch.bool))


def _buffer(workspace: Workspace, name: str, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return workspace.get(name, tuple(like.shape), dtype, like.device)


def kept_log_masses(
    scaled: torch.Tensor, truncated: torch.Tensor, logprobs: list[float | None], workspace: Workspace
) -> list[float | None] | None:
    """`kept_log_mass` for the rows that return logprobs (None elsewhere); one host copy, none if no row asks."""
    if all(lp is None for lp in logprobs):
        return None
    masses = kept_log_mass(scaled, truncated, workspace).tolist()
    return [mass if lp is not None else None for mass, lp in zip(masses, logprobs, strict=True)]


def kept_token_ids(truncated: torch.Tensor, wanted: list[bool]) -> list[list[int] | None] | None:
    """The ids each wanted row kept (the support its token was drawn from), ascending; None elsewhere."""
    if not any(wanted):
        return None
    rows = [i for i, want in enumerate(wanted) if want]
    kept = torch.isfinite(truncated[rows]).cpu()  # one copy for all wanted rows
    ids: list[list[int] | None] = [None] * len(wanted)
    for row, mask in zip(rows, kept, strict=True):
        ids[row] = mask.nonzero()[:, 0].tolist()
    return ids
