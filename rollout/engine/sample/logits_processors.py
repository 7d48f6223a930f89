"""vLLM's logits processors: logit_bias, presence/frequency penalties, allowed_token_ids, bad_words, min_tokens.

They shape the distribution a token is drawn from, so "processed" logprobs and the kept mass see
them. vLLM's order is allowed_token_ids, bad_words, min_tokens and logit_bias, then repetition,
frequency and presence penalties (vllm/v1/sample/sampler.py). Bans set -inf, which every later
step keeps (penalties multiply or subtract finite values), so the sampler applies them last: same
result, and the repetition penalty's fp32 clamp cannot turn a ban back into a finite logit.
This file holds what each setting means for a row; processor_batch.py applies them to a whole step.
"""

from __future__ import annotations

from collections.abc import Iterable

from rollout.sampling_params import SamplingParams


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


def banned_token_ids(
    params: SamplingParams, seen: list[int], num_prompt_tokens: int, eos_token_ids: frozenset[int]
) -> set[int]:
    """bad_words (vLLM: a word's last token when the output, seen[num_prompt_tokens:], ends with the rest
    of it) and min_tokens' stop tokens while the output is shorter than min_tokens."""
    num_output = len(seen) - num_prompt_tokens
    banned = set()
    for word in params.bad_words_token_ids:
        prefix = word[:-1]
        if len(prefix) <= num_output and (not prefix or tuple(seen[len(seen) - len(prefix) :]) == prefix):
            banned.add(word[-1])
    if num_output < params.min_tokens:
        banned |= min_tokens_banned(params, eos_token_ids)
    return banned
