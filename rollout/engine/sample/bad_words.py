"""bad_words: strings to the token sequences the sampler bans, with vLLM's rule.

Each word is tokenized without special tokens, as written (left-stripped) and with a leading space,
so it is banned both at the start of the text and mid-text; the spaced form is kept only when it
is a different word token of the same length (vllm/sampling_params.py, update_from_tokenizer).
"""

from __future__ import annotations

import dataclasses

from transformers import PreTrainedTokenizerBase

from rollout.sampling_params import SamplingParams


def bad_words_token_ids(words: tuple[str, ...], tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    sequences: list[list[int]] = []
    for word in words:
        for add_prefix_space in (False, True):
            ids = tokenizer.encode(
                (" " if add_prefix_space else "") + word.lstrip(), add_special_tokens=False
            )
            if not ids:
                raise ValueError(f"bad_words: {word!r} tokenizes to no tokens")
            if not add_prefix_space or (ids[0] != sequences[-1][0] and len(ids) == len(sequences[-1])):
                sequences.append(ids)
    return sequences


def with_bad_words_tokenized(
    params: SamplingParams, tokenizer: PreTrainedTokenizerBase | None
) -> SamplingParams:
    """`params` with its bad_words strings moved into bad_words_token_ids (needs a tokenizer)."""
    if not params.bad_words:
        return params
    if tokenizer is None:
        raise ValueError("bad_words: the server has no tokenizer; pass bad_words_token_ids instead")
    extra = tuple(tuple(s) for s in bad_words_token_ids(params.bad_words, tokenizer))
    return dataclasses.replace(params, bad_words=(), bad_words_token_ids=params.bad_words_token_ids + extra)
