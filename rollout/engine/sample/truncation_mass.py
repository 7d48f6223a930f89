"""What the truncation filters (top-k, top-p, min-p) kept, per sampled row: its probability mass, its ids.

"processed" logprobs are renormalised over the kept tokens, so they differ from the untruncated
temperature-scaled logprobs a trainer recomputes by exactly log(kept mass). Returning that term
lets a trainer's importance-sampling correction compare like with like (TRL issue #6789).
"""

from __future__ import annotations

import torch


def kept_log_mass(scaled: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """log(sum of softmax(scaled) over the tokens `truncated` kept), per row: [R] fp32, <= 0.

    scaled: [R, vocab] logits after penalties and temperature; truncated: the same with every
    dropped token at -inf. A row the filters left whole gets exactly 0.
    """
    if truncated is scaled:
        return torch.zeros(scaled.shape[0], dtype=torch.float32, device=scaled.device)
    kept = torch.logsumexp(truncated.float(), dim=-1) - torch.logsumexp(scaled.float(), dim=-1)
    # the bans (-inf before truncation) are part of `scaled`: only tokens the filters dropped count
    untouched = (torch.isfinite(truncated) == torch.isfinite(scaled)).all(dim=-1)
    return torch.where(untouched, torch.zeros_like(kept), kept.clamp(max=0.0))


def kept_log_masses(
    scaled: torch.Tensor, truncated: torch.Tensor, logprobs: list[float | None]
) -> list[float | None] | None:
    """`kept_log_mass` for the rows that return logprobs (None elsewhere); one host copy, none if no row asks."""
    if all(lp is None for lp in logprobs):
        return None
    masses = kept_log_mass(scaled, truncated).tolist()
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
