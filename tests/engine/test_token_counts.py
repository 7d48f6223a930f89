"""A sequence's token counts kept from step to step (rollout/engine/sample/token_counts.py): a step counts
only what was appended since the last, a list it cannot continue is counted from scratch, and the engine
keeping them samples exactly what counting afresh each step samples."""

from __future__ import annotations

import pytest

from rollout import SamplingParams
from rollout.engine import llm_engine
from rollout.engine.sample.token_counts import TokenCounts
from tests.builders import random_prompts, tiny_llm


def fresh(tokens: list[int], num_prompt_tokens: int) -> tuple[list[int], list[int], list[int]]:
    counts = TokenCounts().update(tokens, num_prompt_tokens)
    return list(counts.seen_ids), list(counts.output_ids), list(counts.output_counts)


def kept(counts: TokenCounts) -> tuple[list[int], list[int], list[int]]:
    return list(counts.seen_ids), list(counts.output_ids), list(counts.output_counts)


def test_counts_are_the_distinct_ids_and_the_output_ids_with_their_counts_in_first_seen_order() -> None:
    assert fresh([4, 2, 4, 7, 2, 7, 7, 9], 3) == ([4, 2, 7, 9], [7, 2, 9], [3, 1, 1])


def test_a_step_counts_only_the_tokens_appended_since_the_last() -> None:
    tokens, counts = [1, 2, 3], TokenCounts()
    counts.update(tokens, 1)
    tokens[1] = 9  # an edit the engine never makes: visible only if the counted part were read again
    tokens.append(3)
    assert kept(counts.update(tokens, 1)) == ([1, 2, 3], [2, 3], [1, 2])


def test_a_list_shorter_than_counted_is_counted_from_scratch() -> None:
    tokens, counts = [1, 2, 3, 3, 5], TokenCounts()
    counts.update(tokens, 1)
    del tokens[3:]
    assert kept(counts.update(tokens, 1)) == fresh([1, 2, 3], 1)


def test_another_list_or_prompt_length_is_counted_from_scratch() -> None:
    counts = TokenCounts()
    counts.update([1, 2, 3], 1)
    assert kept(counts.update([5, 6, 6, 7], 1)) == fresh([5, 6, 6, 7], 1)
    assert kept(counts.update(tokens := [5, 6, 6, 7, 8], 1)) == fresh(tokens, 1)
    assert kept(counts.update(tokens, 3)) == fresh(tokens, 3)


PENALIZED = SamplingParams(
    n=3,
    seed=5,
    max_tokens=24,
    ignore_eos=True,
    logprobs=2,
    repetition_penalty=1.4,
    frequency_penalty=0.6,
    presence_penalty=-0.3,
)


@pytest.mark.parametrize(
    "params",
    [
        PENALIZED,
        SamplingParams(n=2, seed=5, max_tokens=24, ignore_eos=True, logprobs=2, repetition_penalty=0.7),
        SamplingParams(n=2, seed=5, max_tokens=24, ignore_eos=True, logprobs=2, frequency_penalty=1.5),
    ],
    ids=["all", "repetition", "frequency"],
)
def test_the_engine_keeping_counts_samples_what_counting_afresh_each_step_samples(
    params: SamplingParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = random_prompts(3, 5, 30, seed=2)
    kept_out = tiny_llm().generate(prompts, params)
    monkeypatch.setattr(llm_engine, "needs_token_counts", lambda p: False)  # rows carry no counts
    afresh_out = tiny_llm().generate(prompts, params)
    for kept_request, afresh_request in zip(kept_out, afresh_out, strict=True):
        for got, want in zip(kept_request.outputs, afresh_request.outputs, strict=True):
            assert (got.token_ids, got.token_logprobs, got.top_logprobs) == (
                want.token_ids,
                want.token_logprobs,
                want.top_logprobs,
            )


def test_sequences_without_penalties_keep_no_counts() -> None:
    engine = tiny_llm().engine
    engine.add_request("plain", [3, 4, 5], SamplingParams(max_tokens=4, n=2, logit_bias={7: 1.0}))
    engine.add_request("penalized", [3, 4, 5], SamplingParams(max_tokens=4, n=2, presence_penalty=0.5))
    engine.step()
    engine.step()  # forked: every sample has sampled
    requests = engine.requests
    assert [seq.token_counts for seq in requests["plain"].sequences] == [None, None]
    assert all(seq.token_counts is not None for seq in requests["penalized"].sequences)
