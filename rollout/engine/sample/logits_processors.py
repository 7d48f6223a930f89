"""vLLM's logits processors: logit_bias, presence/frequency penalties, allowed_token_ids, bad_words, min_tokens.

They shape the distribution a token is drawn from, so "processed" logprobs and the kept mass see
them. vLLM's order is allowed_token_ids, bad_words, min_tokens and logit_bias, then repetition,
frequency and presence penalties (vllm/v1/sample/sampler.py). Bans set -inf, which every later
step keeps (penalties multiply or subtract finite values), so the sampler applies them last: same
result, and the repetition penalty's fp32 clamp cannot turn a ban back into a finite logit.
Each row is processed alone (a row's result never depends on the others), and a step where no row
asks for a processor returns the logits untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from rollout.engine.host_to_device import to_device
from rollout.sampling_params import SamplingParams

_NEG_INF = float("-inf")


def apply_logit_bias(logits: torch.Tensor, rows: list) -> torch.Tensor:
    """Adds each row's bias to its tokens' logits (before the penalties, as vLLM)."""
    return _per_row(logits, rows, lambda p: bool(p.logit_bias), _bias_row)


def apply_penalties_and_bans(logits: torch.Tensor, rows: list, eos_token_ids: frozenset[int]) -> torch.Tensor:
    """Frequency then presence penalty (OpenAI's formula, over output tokens), then the bans."""
    return _per_row(
        logits,
        rows,
        _penalizes_or_bans,
        lambda row_logits, row: _penalize_and_ban(row_logits, row, eos_token_ids),
    )


def check_against_vocab(params: SamplingParams, vocab_size: int, eos_token_ids: Iterable[int]) -> None:
    """Raises ValueError naming the field for ids outside [0, vocab_size), or settings that ban every token."""
    fields = (
        ("logit_bias", list(params.logit_bias or ())),
        ("allowed_token_ids", list(params.allowed_token_ids or ())),
        ("bad_words_token_ids", [t for seq in params.bad_words_token_ids for t in seq]),
    )
    for name, ids in fields:
        outside = [t for t in ids if t >= vocab_size]
        if outside:
            raise ValueError(f"{name}: token id {outside[0]} is outside the vocabulary [0, {vocab_size})")
    candidates = set(params.allowed_token_ids) if params.allowed_token_ids is not None else None
    if candidates is None:
        return  # the whole vocabulary: a handful of bans cannot empty it
    banned = {seq[-1] for seq in params.bad_words_token_ids}
    if params.min_tokens:
        banned |= min_tokens_banned(params, eos_token_ids)
    if candidates <= banned:
        raise ValueError(
            "allowed_token_ids: every allowed token can be banned by bad_words or min_tokens (the stop "
            "tokens), which would leave nothing to sample"
        )


def min_tokens_banned(params: SamplingParams, eos_token_ids: Iterable[int]) -> set[int]:
    """vLLM's all_stop_token_ids: the stop tokens, and EOS unless ignore_eos."""
    return set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos_token_ids))


def _per_row(
    logits: torch.Tensor, rows: list, wants: Callable[[SamplingParams], bool], apply
) -> torch.Tensor:
    active = [i for i, row in enumerate(rows) if wants(row.params)]
    if not active:
        return logits
    logits = logits.clone()
    for i in active:
        apply(logits[i], rows[i])  # in place on the row's view
    return logits


def _bias_row(row_logits: torch.Tensor, row) -> None:
    bias = row.params.logit_bias
    ids = to_device(list(bias), torch.int64, row_logits.device)
    row_logits[ids] += to_device(list(bias.values()), row_logits.dtype, row_logits.device)


def _penalizes_or_bans(p: SamplingParams) -> bool:
    return (
        bool(p.presence_penalty or p.frequency_penalty or p.min_tokens or p.bad_words_token_ids)
        or p.allowed_token_ids is not None
    )


def _penalize_and_ban(row_logits: torch.Tensor, row, eos_token_ids: frozenset[int]) -> None:
    params: SamplingParams = row.params
    output = row.seen_token_ids[row.num_prompt_tokens :]
    device = row_logits.device
    if output and (params.frequency_penalty or params.presence_penalty):
        counts = torch.bincount(to_device(output, torch.int64, device), minlength=row_logits.shape[0])
        seen = counts.nonzero()[:, 0]
        # vLLM: logits -= frequency * count; logits -= presence * (count > 0), in the logits' dtype
        row_logits[seen] -= params.frequency_penalty * counts[seen].to(row_logits.dtype)
        row_logits[seen] -= params.presence_penalty
    banned = _banned(params, output, eos_token_ids)
    if banned:
        row_logits[to_device(sorted(banned), torch.int64, device)] = _NEG_INF
    if params.allowed_token_ids is not None:
        keep = torch.zeros(row_logits.shape[0], dtype=torch.bool, device=device)
        keep[to_device(list(params.allowed_token_ids), torch.int64, device)] = True
        row_logits.masked_fill_(~keep, _NEG_INF)


def _banned(params: SamplingParams, output: list[int], eos_token_ids: frozenset[int]) -> set[int]:
    """bad_words (vLLM: a word's last token when the output ends with the rest of it) and min_tokens' stop tokens."""
    banned = set()
    for word in params.bad_words_token_ids:
        prefix = word[:-1]
        if len(prefix) <= len(output) and (not prefix or tuple(output[-len(prefix) :]) == prefix):
            banned.add(word[-1])
    if len(output) < params.min_tokens:
        banned |= min_tokens_banned(params, eos_token_ids)
    return banned
