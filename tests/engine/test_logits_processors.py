"""The logits processors against vLLM's definitions (vllm/v1/sample: ops/penalties.py via
model_executor/layers/utils.apply_penalties, ops/bad_words.py, logits_processor/builtin.py) and
their documented examples, through the sampler and through the engine."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from rollout import SamplingParams
from rollout.engine.sample.bad_words import bad_words_token_ids
from rollout.engine.sample.sampler import Sampler, SampleRow
from tests.builders import VOCAB, char_tokenizer, tiny_llm

EOS = 2  # the tiny models' eos_token_id
PROMPT = [5, 6, 7, 8]


def logits_of(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3


def processed(params: SamplingParams, seen: list[int], num_prompt: int, logits: torch.Tensor) -> torch.Tensor:
    """The processed log-distribution of one row (logprobs=VOCAB returns every token's)."""
    params = replace(params, logprobs=VOCAB, temperature=1.0)
    out = Sampler(seed=0, eos_token_ids=frozenset({EOS}))(
        logits[None], [SampleRow(params, 0, seen, num_prompt)]
    )
    lp = torch.full((VOCAB,), float("-inf"))
    for token, value in out.top_logprobs[0].items():
        lp[token] = value
    return lp


def test_frequency_and_presence_penalties_follow_the_openai_formula_over_output_tokens() -> None:
    logits = logits_of(1)[0]
    prompt, output = [9, 9, 10], [10, 11, 11, 11]
    params = SamplingParams(frequency_penalty=0.7, presence_penalty=-0.4)
    expected = logits.clone()
    for token, count in {10: 1, 11: 3}.items():  # vLLM counts output tokens only; the prompt's 9 is untouched
        expected[token] = expected[token] - 0.7 * count - (-0.4)
    got = processed(params, prompt + output, len(prompt), logits)
    torch.testing.assert_close(got, torch.log_softmax(expected, -1), rtol=0, atol=1e-6)


def test_logit_bias_is_added_before_the_repetition_penalty() -> None:
    logits = logits_of(1, seed=1)[0]
    logits[20], logits[21] = 1.5, -1.5
    params = SamplingParams(logit_bias={20: -3.0, 21: 1.0}, repetition_penalty=2.0)
    expected = logits.clone()
    expected[20] = (1.5 - 3.0) * 2.0  # biased negative, then multiplied (transformers' rule)
    expected[21] = (-1.5 + 1.0) * 2.0
    got = processed(params, [20, 21], 0, logits)
    torch.testing.assert_close(got, torch.log_softmax(expected, -1), rtol=0, atol=1e-6)


def test_allowed_token_ids_leave_only_them_in_the_processed_distribution() -> None:
    logits = logits_of(1, seed=2)[0]
    allowed = [3, 40, 77]
    got = processed(SamplingParams(allowed_token_ids=allowed), [5], 1, logits)
    assert torch.isinf(got[[t for t in range(VOCAB) if t not in allowed]]).all()
    torch.testing.assert_close(got[allowed], torch.log_softmax(logits[allowed], -1), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("output", "banned"),
    [
        ([], {30}),  # a one-token word is always banned; [31, 32] needs 31 just before
        ([5, 31], {30, 32}),
        ([31, 5], {30}),
    ],
)
def test_bad_words_ban_a_words_last_token_when_the_output_ends_with_the_rest(
    output: list[int], banned: set[int]
) -> None:
    params = SamplingParams(bad_words_token_ids=[[30], [31, 32]])
    got = processed(params, PROMPT + output, len(PROMPT), logits_of(1, seed=3)[0])
    assert {t for t in range(VOCAB) if torch.isinf(got[t])} == banned


def test_bad_words_match_output_tokens_only_as_vllm() -> None:
    params = SamplingParams(bad_words_token_ids=[[31, 32]])
    got = processed(params, [5, 31], 2, logits_of(1, seed=3)[0])  # 31 ends the prompt, not the output
    assert torch.isfinite(got).all()


def test_bad_word_strings_tokenize_with_and_without_a_leading_space_as_vllm() -> None:
    tokenizer = char_tokenizer()  # one token per character: " ab" is longer than "ab", so only "ab" stays
    assert bad_words_token_ids(("ab",), tokenizer) == [tokenizer.encode("ab", add_special_tokens=False)]


def test_min_tokens_bans_eos_and_stop_tokens_until_reached() -> None:
    llm = tiny_llm()
    params = SamplingParams(
        max_tokens=12, min_tokens=5, temperature=0, logit_bias={EOS: 100.0}, stop_token_ids=[9], logprobs=3
    )
    sample = llm.generate([PROMPT], params)[0].outputs[0]
    # EOS wins as soon as it may: the sixth token, after five forced non-stop tokens
    assert sample.token_ids[-1] == EOS and len(sample.token_ids) == 6 and sample.finish_reason == "stop"
    for top in sample.top_logprobs[:5]:  # the processed distribution says EOS and 9 were impossible
        assert EOS not in top and 9 not in top
    assert sample.token_logprobs[5] > -1e-3  # then EOS takes nearly all the mass


def test_min_tokens_does_not_ban_eos_with_ignore_eos_but_still_bans_stop_tokens() -> None:
    llm = tiny_llm()
    params = SamplingParams(
        max_tokens=4, min_tokens=4, temperature=0, logit_bias={9: 100.0}, stop_token_ids=[9]
    )
    sample = llm.generate([PROMPT], replace(params, ignore_eos=True))[0].outputs[0]
    assert 9 not in sample.token_ids and len(sample.token_ids) == 4


def test_rows_with_and_without_processors_are_bit_identical_alone_and_batched() -> None:
    logits = logits_of(4, seed=4)
    params = [
        SamplingParams(seed=1, logprobs=2),
        SamplingParams(seed=2, logprobs=2, presence_penalty=1.0, logit_bias={7: 2.0}, top_k=5),
        SamplingParams(seed=3, logprobs=2, allowed_token_ids=[4, 5, 6], min_tokens=2, stop_token_ids=[5]),
        SamplingParams(seed=4, logprobs=2, bad_words_token_ids=[[8], [9, 10]], frequency_penalty=-1.0),
    ]
    rows = [SampleRow(p, 0, [9, 9, 10, 9], 1) for p in params]
    batched = Sampler(seed=0, eos_token_ids=frozenset({EOS}))(logits, rows)
    for i, row in enumerate(rows):
        alone = Sampler(seed=0, eos_token_ids=frozenset({EOS}))(logits[i : i + 1], [row])
        assert alone.token_ids[0] == batched.token_ids[i]
        assert alone.logprobs[0] == batched.logprobs[i] and alone.top_logprobs[0] == batched.top_logprobs[i]
        assert alone.kept_log_masses[0] == batched.kept_log_masses[i]


def test_bans_alone_leave_the_kept_mass_at_zero() -> None:
    """kept_log_mass measures top-k/top-p/min-p only; the bans are part of the processed distribution."""
    logits = logits_of(2, seed=5)
    rows = [
        SampleRow(SamplingParams(seed=1, logprobs=0, allowed_token_ids=[4, 5, 6]), 0, [9], 1),
        SampleRow(SamplingParams(seed=1, logprobs=0, top_k=3), 0, [9], 1),
    ]
    out = Sampler(seed=0)(logits, rows)
    assert out.kept_log_masses[0] == 0.0 and out.kept_log_masses[1] < 0.0


def test_a_banned_token_stays_minus_inf_and_unkept_under_a_temperature_below_one() -> None:
    """The overflow clamp of temperature < 1 once floored -inf at -3.4e38: a banned token then showed a
    finite value in top_logprobs and counted as kept in kept_token_ids."""
    allowed = [4, 5, 6]
    params = SamplingParams(
        seed=1, temperature=0.5, logprobs=VOCAB, allowed_token_ids=allowed, return_kept_tokens=True
    )
    out = Sampler(seed=0)(logits_of(1, seed=6), [SampleRow(params, 0, [9], 1)])
    assert out.kept_token_ids[0] == allowed
    banned = {t: v for t, v in out.top_logprobs[0].items() if t not in allowed}
    assert banned and all(v == float("-inf") for v in banned.values())


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(min_tokens=-1), "min_tokens"),
        (dict(min_tokens=5, max_tokens=4), "min_tokens"),
        (dict(presence_penalty=2.5), "presence_penalty"),
        (dict(frequency_penalty=float("nan")), "frequency_penalty"),
        (dict(logit_bias={"3": 1.0}), "logit_bias"),
        (dict(logit_bias={3: float("inf")}), "logit_bias"),
        (dict(allowed_token_ids=[]), "allowed_token_ids"),
        (dict(allowed_token_ids=[-1]), "allowed_token_ids"),
        (dict(bad_words=[""]), "bad_words"),
        (dict(bad_words="abc"), "bad_words"),
        (dict(bad_words_token_ids=[[]]), "bad_words_token_ids"),
        (dict(prompt_logprobs=-1), "prompt_logprobs"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(logit_bias={VOCAB: 1.0}), "logit_bias"),
        (dict(allowed_token_ids=[3, VOCAB]), "allowed_token_ids"),
        (dict(bad_words_token_ids=[[VOCAB]]), "bad_words_token_ids"),
        (dict(allowed_token_ids=[EOS, 9], stop_token_ids=[9], min_tokens=1), "allowed_token_ids"),
        (dict(allowed_token_ids=[4], bad_words_token_ids=[[3, 4]]), "allowed_token_ids"),
        (dict(bad_words=["ab"]), "bad_words"),  # the engine has no tokenizer
    ],
)
def test_settings_the_model_cannot_honour_are_refused_and_nothing_runs(kwargs: dict, field: str) -> None:
    llm = tiny_llm()
    with pytest.raises(ValueError, match=field):
        llm.generate([PROMPT, PROMPT], [SamplingParams(), SamplingParams(**kwargs)])
    assert llm.stats()["num_requests_finished"] == 0 and not llm.engine.has_unfinished_requests()
