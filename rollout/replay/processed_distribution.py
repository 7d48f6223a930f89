"""The distribution each token was drawn from, recomputed on a trainer's logits with the sampler's own code.

The same steps as the sampler (rollout/engine/sample/sampler.py), through the same functions: the
step's processors and grammar masks (step_processors.py), temperature (temperature.py), the truncation
filters (truncation.py), an fp32 log-softmax. What differs is only how, so that autograd can follow:
the processors write into a copy of the trainer's logits, the filters' verdicts (which tokens survive,
a function of the values, with no gradient) are found on a detached copy and applied with masked_fill.
On the logits the server computed this is the server's processed distribution bit for bit.
"""

from __future__ import annotations

import torch

from rollout.engine.sample.sampler import SampleRow
from rollout.engine.sample.step_processors import step_processors
from rollout.engine.sample.temperature import temperature_scaled
from rollout.engine.sample.truncation import truncate
from rollout.ops.workspace import Workspace


def processed_log_softmax(
    logits: torch.Tensor, rows: list[SampleRow], token_ids: torch.Tensor, eos_token_ids: frozenset[int]
) -> torch.Tensor:
    """[N, vocab] fp32 log-probabilities of the processed distribution of each row (differentiable in
    `logits`, [N, vocab], never written). token_ids: [N] int64, the token each row drew: ValueError when
    the processors or the grammar forbid it (the rows are not the settings it was drawn with)."""
    logits = logits.float()
    step = step_processors(rows, logits.shape[1], eos_token_ids, logits.device)
    if step is not None:
        logits = logits.clone(memory_format=torch.contiguous_format)  # the processors write in place
        step.apply(logits)
        _check_drawable(logits, token_ids)
    scaled = temperature_scaled(logits, rows)
    return torch.log_softmax(_truncated(scaled, rows, token_ids), dim=-1)


def _truncated(scaled: torch.Tensor, rows: list[SampleRow], token_ids: torch.Tensor) -> torch.Tensor:
    """`scaled` with the tokens top-k/top-p/min-p drop at -inf. The drawn token always stays: the server
    kept it, and the trainer's logits can put it a rounding error past the filter's boundary."""
    detached = scaled.detach()
    with torch.no_grad():
        truncated = truncate(detached, rows, Workspace())
        if truncated is detached:
            return scaled
        dropped = torch.isneginf(truncated)
        dropped[torch.arange(len(rows), device=scaled.device), token_ids] = False
    return scaled.masked_fill(dropped, float("-inf"))


def _check_drawable(logits: torch.Tensor, token_ids: torch.Tensor) -> None:
    chosen = logits.detach().gather(1, token_ids[:, None])[:, 0]
    forbidden = torch.isneginf(chosen).nonzero()[:, 0].tolist()
    if forbidden:
        raise ValueError(
            f"the sampled token at row {forbidden[0]} (id {int(token_ids[forbidden[0]])}) is forbidden by the "
            f"settings replayed ({len(forbidden)} such rows): the sample was not drawn with these settings"
        )
