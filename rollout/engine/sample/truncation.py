"""The truncation filters (top-k, top-p, min-p) as drop masks, every [R, vocab] temporary in reused memory.

Each filter reads what the previous one kept and marks the tokens it drops. The first drop writes the
scaled logits, dropped tokens at -inf, into a workspace buffer (the scaled ones stay as they are: the
kept mass compares the two); later drops mask that buffer in place. On a CPU a fresh [R, vocab] tensor
costs more in page faults than the arithmetic written into it, so none is allocated per step.
"""

from __future__ import annotations

from math import inf

import torch

from rollout.ops.host_to_device import to_device
from rollout.ops.workspace import Workspace


def truncate(scaled: torch.Tensor, rows: list, workspace: Workspace) -> torch.Tensor:
    """scaled: [R, vocab] after penalties and temperature. Returns `scaled` itself when no filter drops
    anything (kept_log_mass relies on it), else the workspace's "truncated" buffer."""
    truncated = scaled
    for drops in (_top_k_drops, _top_p_drops, _min_p_drops):
        drop = drops(truncated, rows, workspace)
        if drop is not None:
            truncated = _drop(truncated, drop, scaled, workspace)
    return truncated


def row_column(values: list[float], like: torch.Tensor) -> torch.Tensor:
    """[R, 1] in `like`'s dtype and device: a per-row setting to broadcast over the vocabulary."""
    return to_device(values, like.dtype, like.device)[:, None]


def _drop(
    logits: torch.Tensor, drop: torch.Tensor, scaled: torch.Tensor, workspace: Workspace
) -> torch.Tensor:
    """`logits.masked_fill(drop, -inf)`, in place unless `logits` is `scaled` (then into a buffer)."""
    if logits is not scaled:
        return logits.masked_fill_(drop, -inf)
    out = _buffer(workspace, "truncated", logits, logits.dtype)
    return torch.where(drop, torch.full((), -inf, dtype=logits.dtype, device=logits.device), logits, out=out)


def _buffer(workspace: Workspace, name: str, like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return workspace.get(name, tuple(like.shape), dtype, like.device)


def _top_k_drops(logits: torch.Tensor, rows: list, workspace: Workspace) -> torch.Tensor | None:
    vocab = logits.shape[1]
    active = [0 < row.params.top_k < vocab and not row.params.greedy for row in rows]
    if not any(active):
        return None
    # k-th largest value per row, without a full sort of the vocabulary; rows without top-k take
    # k = 1 (cheap) and a threshold of -inf
    ks = [row.params.top_k if on else 1 for row, on in zip(rows, active, strict=True)]
    kth = logits.topk(max(ks), dim=-1).values.gather(
        1, to_device(ks, torch.int64, logits.device)[:, None] - 1
    )
    kth = kth.masked_fill(~to_device(active, torch.bool, logits.device)[:, None], -inf)
    return torch.lt(logits, kth, out=_buffer(workspace, "drop", logits, torch.bool))


def _top_p_drops(logits: torch.Tensor, rows: list, workspace: Workspace) -> torch.Tensor | None:
    # a row without top-p gets an infinite threshold: its rounded cumulative mass can reach 1.0
    # before the tail, and comparing it with p = 1.0 would cut tokens only when batched
    ps = [row.params.top_p if row.params.top_p < 1.0 and not row.params.greedy else inf for row in rows]
    if all(p == inf for p in ps):
        return None
    sorted_logits = _buffer(workspace, "sorted", logits, logits.dtype)
    order = _buffer(workspace, "order", logits, torch.int64)
    torch.sort(logits, dim=-1, descending=True, out=(sorted_logits, order))
    probs = torch.softmax(sorted_logits, dim=-1, out=_buffer(workspace, "probs", logits, logits.dtype))
    # drop a token when the mass before it already reaches p (the top token always stays)
    mass_before = torch.cumsum(probs, dim=-1, out=sorted_logits).sub_(probs)
    drop_sorted = torch.ge(
        mass_before, row_column(ps, probs), out=_buffer(workspace, "drop sorted", logits, torch.bool)
    )
    drop_sorted[:, 0] = False  # a top_p that rounds to 0 in fp32 still keeps the top token
    return _buffer(workspace, "drop", logits, torch.bool).zero_().scatter_(1, order, drop_sorted)


def _min_p_drops(logits: torch.Tensor, rows: list, workspace: Workspace) -> torch.Tensor | None:
    ms = [row.params.min_p if not row.params.greedy else 0.0 for row in rows]
    if all(m == 0.0 for m in ms):
        return None
    probs = torch.softmax(logits, dim=-1, out=_buffer(workspace, "probs", logits, logits.dtype))
    threshold = probs.amax(dim=-1, keepdim=True) * row_column(ms, probs)
    return torch.lt(probs, threshold, out=_buffer(workspace, "drop", logits, torch.bool))
