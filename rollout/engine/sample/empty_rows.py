"""Rows whose masks leave no token: a grammar with the bans (or alone) can forbid the whole vocabulary.

Softmax over an all -inf row is NaN, so such a row would draw garbage. Only rows that can be emptied
(a grammar or a ban) are checked; plain rows keep the fast path. An empty row gets one finite logit so
the step's ops stay clean, and the sampler reports the row: the engine ends that sample with
finish_reason "abort" and appends nothing drawn from it.
"""

from __future__ import annotations

import logging

import torch

from rollout.ops.host_to_device import to_device

logger = logging.getLogger(__name__)


def can_be_emptied(row) -> bool:
    params = row.params
    return (
        row.grammar is not None
        or params.allowed_token_ids is not None
        or bool(params.bad_words_token_ids or params.min_tokens)
    )


def guard_empty_rows(
    logits: torch.Tensor, rows: list, model_logits: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits: [R, vocab], the masked ones. Returns them with token 0 given logit 0 in every empty row
    (one finite logit: no NaN downstream, and O(R) work), and a [R] bool of the empty rows (None when no
    row was checked: nothing done).

    Written in place: a checked row went through the bans or the grammar mask, which copy the logits
    first; `model_logits` (the caller's tensor) is copied here should that ever not be so."""
    checked = [i for i, row in enumerate(rows) if can_be_emptied(row)]
    if not checked:
        return logits, None
    if logits is model_logits:
        logits = logits.clone()
    if len(checked) == len(rows):
        empty = logits.amax(dim=-1) == float("-inf")  # one read of the logits, no [R, vocab] temporary
    else:
        index = to_device(checked, torch.int64, logits.device)
        empty = torch.zeros(len(rows), dtype=torch.bool, device=logits.device)
        empty[index] = logits.index_select(0, index).amax(dim=-1) == float("-inf")
    logits[:, 0] = logits[:, 0].masked_fill(empty, 0.0)
    return logits, empty


def empty_row_indices(empty: torch.Tensor | None) -> list[int]:
    """The rows guard_empty_rows found empty (one [R] device-to-host copy, only with checked rows)."""
    if empty is None:
        return []
    return [i for i, e in enumerate(empty.tolist()) if e]


def log_no_token(seq, row) -> None:
    """The reason that goes with a flagged row's "abort" (CompletionOutput has no field for it)."""
    logger.warning(
        "request %s sample %d ends with finish_reason 'abort' after %d tokens: %s",
        seq.request.request_id,
        seq.sample_index,
        seq.num_output_tokens,
        no_token_reason(row),
    )


def no_token_reason(row) -> str:
    """Why a flagged row had nothing to draw."""
    params = row.params
    bans = [
        name
        for name, on in (
            ("min_tokens", params.min_tokens),
            ("allowed_token_ids", params.allowed_token_ids is not None),
            ("bad_words", params.bad_words_token_ids),
        )
        if on
    ]
    if row.grammar is None:
        return f"the bans ({', '.join(bans)}) leave no token of the vocabulary"
    if not bans:
        return "the grammar allows no token of the vocabulary here (it needs text no token writes)"
    return f"no token the grammar allows here survives the bans ({', '.join(bans)})"
