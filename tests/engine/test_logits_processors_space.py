"""Every valid combination of the logits processors and prompt logprobs, through the engine, gives
finite logprobs, valid ids inside allowed_token_ids and outside the bans, lengths min_tokens..max_tokens,
stop reasons that mean what they say, and leaks no block: property-based."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rollout import SamplingParams
from tests.builders import VOCAB, tiny_llm

EOS = 2
PROMPTS = [[5, 6, 7, 8, 9, 5, 6], [3, 40, 41, 42]]
TOKENS = st.integers(0, VOCAB - 1)
PENALTY = st.one_of(st.just(0.0), st.floats(-2.0, 2.0))


@st.composite
def processor_params(draw) -> SamplingParams:
    max_tokens = draw(st.integers(1, 8))
    return SamplingParams(
        n=draw(st.integers(1, 2)),
        max_tokens=max_tokens,
        min_tokens=draw(st.integers(0, max_tokens)),
        temperature=draw(st.sampled_from([0.0, 0.5, 1.0, 3.0])),
        top_k=draw(st.sampled_from([0, 3])),
        seed=draw(st.one_of(st.none(), st.integers(0, 2**32))),
        presence_penalty=draw(PENALTY),
        frequency_penalty=draw(PENALTY),
        repetition_penalty=draw(st.sampled_from([1.0, 1.3])),
        logit_bias=draw(st.one_of(st.none(), st.dictionaries(TOKENS, st.floats(-100, 100), max_size=4))),
        allowed_token_ids=draw(st.one_of(st.none(), st.lists(TOKENS, min_size=1, max_size=6))),
        bad_words_token_ids=draw(st.lists(st.lists(TOKENS, min_size=1, max_size=3), max_size=3)),
        stop_token_ids=draw(st.lists(TOKENS, max_size=2)),
        ignore_eos=draw(st.booleans()),
        logprobs=draw(st.one_of(st.none(), st.integers(0, 3))),
        prompt_logprobs=draw(st.one_of(st.none(), st.integers(0, 2))),
    )


@pytest.fixture(scope="module")
def llm():
    return tiny_llm(seed=0)


def banned_at(params: SamplingParams, output: list[int]) -> set[int]:
    """vLLM's bans before the next token, given the output so far."""
    banned = {
        w[-1]
        for w in params.bad_words_token_ids
        if len(w) - 1 <= len(output) and tuple(output[len(output) - len(w) + 1 :]) == w[:-1]
    }
    if len(output) < params.min_tokens:
        banned |= set(params.stop_token_ids) | (set() if params.ignore_eos else {EOS})
    return banned


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(params=processor_params())
def test_every_valid_processor_setting_gives_valid_samples(llm, params: SamplingParams) -> None:
    try:
        outs = llm.generate(PROMPTS, params)
    except ValueError as exc:  # only the settings that could leave nothing to sample are refused
        assert "allowed_token_ids" in str(exc)
        assume(False)
    stats = llm.stats()
    assert stats["num_blocks_free"] == stats["num_blocks_total"] and not llm.engine.has_unfinished_requests()
    for prompt, out in zip(PROMPTS, outs, strict=True):
        if params.prompt_logprobs is not None:
            assert len(out.prompt_logprobs) == len(prompt)
            assert all(math.isfinite(v) for entry in out.prompt_logprobs[1:] for v in entry.values())
        for sample in out.outputs:
            tokens = sample.token_ids
            assert min(params.min_tokens, params.max_tokens) <= len(tokens) <= params.max_tokens
            for i, token in enumerate(tokens):
                assert 0 <= token < VOCAB and token not in banned_at(params, tokens[:i])
                if params.allowed_token_ids is not None:
                    assert token in params.allowed_token_ids
            stops = set(params.stop_token_ids) | (set() if params.ignore_eos else {EOS})
            assert (sample.finish_reason == "stop") == (tokens[-1] in stops)
            if params.logprobs is not None:
                assert len(sample.token_logprobs) == len(tokens) and all(
                    math.isfinite(lp) for lp in sample.token_logprobs
                )
