"""Every valid SamplingParams, extremes included (1e-300, 5e-324, 1e308), gives finite logprobs,
valid token ids and lengths through the engine: property-based, over the whole parameter space."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout import SamplingParams
from tests.builders import VOCAB, tiny_llm

PROMPTS = [[5, 6, 7, 8, 9, 5, 6], [3, 40, 41, 42]]
# the values that underflow or overflow fp32, drawn often; hypothesis adds its own extremes too
EXTREME = st.sampled_from([1e-45, 1e-300, 1e-38, 5e-324, 1e-6, 1e-5, 3.5e38, 1e300, 1.7e308])
POSITIVE = st.one_of(EXTREME, st.floats(min_value=0.0, exclude_min=True, allow_infinity=False))
UNIT = st.floats(min_value=0.0, max_value=1.0)

sampling_params = st.builds(
    SamplingParams,
    n=st.integers(1, 3),
    max_tokens=st.integers(1, 6),
    temperature=st.one_of(st.just(0.0), POSITIVE),
    top_p=st.one_of(st.just(1.0), UNIT.filter(lambda p: p > 0), EXTREME.filter(lambda p: p <= 1)),
    top_k=st.integers(0, VOCAB + 5),
    min_p=st.one_of(st.just(0.0), UNIT, EXTREME.filter(lambda p: p <= 1)),
    repetition_penalty=st.one_of(st.just(1.0), POSITIVE),
    seed=st.one_of(st.none(), st.integers(0, 2**70)),
    stop_token_ids=st.lists(st.integers(0, VOCAB - 1), max_size=3),
    ignore_eos=st.booleans(),
    logprobs=st.one_of(st.none(), st.integers(0, 5)),
    logprobs_mode=st.sampled_from(["processed", "raw"]),
)


@pytest.fixture(scope="module")
def llm():
    return tiny_llm(seed=0)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI never flakes, failures reproduce
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(params=sampling_params)
def test_every_valid_sampling_params_gives_finite_logprobs_valid_tokens_and_lengths(
    llm, params: SamplingParams
) -> None:
    outs = llm.generate(PROMPTS, params)
    assert [len(o.outputs) for o in outs] == [params.n] * len(PROMPTS)
    for sample in (s for o in outs for s in o.outputs):
        tokens = sample.token_ids
        assert 1 <= len(tokens) <= params.max_tokens
        assert all(0 <= t < VOCAB for t in tokens)
        if sample.finish_reason == "length":
            assert len(tokens) == params.max_tokens
        else:
            assert sample.finish_reason == "stop" and (
                tokens[-1] in params.stop_token_ids or (tokens[-1] == 2 and not params.ignore_eos)
            )
        if params.logprobs is None:
            assert sample.token_logprobs is None
            continue
        assert len(sample.token_logprobs) == len(tokens)
        assert all(math.isfinite(x) and x <= 0 for x in sample.token_logprobs)
        k = params.logprobs
        assert (sample.top_logprobs is None) == (k == 0)
        for token, top in zip(tokens, sample.top_logprobs or [], strict=k > 0):
            # a token the filters removed has probability 0 (-inf); nothing is ever NaN or positive;
            # the sampled token is listed, beside the top k when it is not one of them (vLLM's shape)
            assert token in top and len(top) == k + (token not in list(top)[:k])
            assert all(x <= 0 for x in top.values())
    stats = llm.stats()
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


@pytest.mark.parametrize("value", [1e-45, 1e-300, 1e-38, 9.9e-6])
@pytest.mark.parametrize("field", ["temperature", "top_p"])
def test_a_vanishing_temperature_or_top_p_samples_the_greedy_tokens(llm, field: str, value: float) -> None:
    """Their limit is the argmax: below 1e-5 a temperature samples greedily (vLLM's threshold), and a
    top_p that rounds to 0 keeps only the top token, whose processed logprob is then 0."""
    greedy = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    params = SamplingParams(max_tokens=8, ignore_eos=True, seed=3, logprobs=0, **{field: value})
    got = llm.generate(PROMPTS, params)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in greedy]
    assert all(math.isfinite(x) for o in got for x in o.outputs[0].token_logprobs)
    if field == "top_p":
        assert all(x == 0.0 for o in got for x in o.outputs[0].token_logprobs)
