"""SamplerReplay against the engine's Sampler: on the logits a sample was drawn from, the replayed processed
logprob of every token is the sampler's bit for bit, for each setting alone and all together, several
samples with their own settings in one call, structured outputs included; and what the replay refuses."""

from __future__ import annotations

import pytest
import torch

from rollout import SamplingParams
from rollout.replay import SamplerReplay
from tests.replay.replay_builders import EOS, PROMPT, VOCAB, draw

DIGITS = list(range(10, 20))
SETTINGS = {
    "min_tokens": dict(min_tokens=6),
    "bad_words": dict(bad_words_token_ids=[[11], [12, 13], [5, 9, 14]]),
    "allowed_token_ids": dict(allowed_token_ids=[*DIGITS, EOS]),
    "logit_bias": dict(logit_bias={11: 4.0, 12: -3.0, EOS: -1.5}),
    "frequency_penalty": dict(frequency_penalty=1.5),
    "presence_penalty": dict(presence_penalty=-1.0),
    "repetition_penalty": dict(repetition_penalty=1.6),
    "top_k": dict(top_k=5),
    "top_p": dict(top_p=0.7),
    "min_p": dict(min_p=0.15),
    "temperature": dict(temperature=0.6),
    "greedy": dict(temperature=0.0),
    "stop_token_ids_with_min_tokens": dict(stop_token_ids=[13], min_tokens=4, ignore_eos=True),
    "everything": dict(
        min_tokens=4,
        bad_words_token_ids=[[11], [12, 13]],
        allowed_token_ids=[*DIGITS, 5, 6, EOS],
        logit_bias={14: 2.0, 5: -2.0},
        frequency_penalty=0.7,
        presence_penalty=0.4,
        repetition_penalty=1.3,
        temperature=0.8,
        top_k=8,
        top_p=0.9,
        min_p=0.05,
    ),
}


def replay_of() -> SamplerReplay:
    return SamplerReplay(VOCAB, [EOS])


@pytest.mark.parametrize("name", SETTINGS)
def test_replayed_logprobs_equal_the_samplers_bit_for_bit(name: str) -> None:
    params = SamplingParams(max_tokens=64, **SETTINGS[name])
    for seed in range(3):
        sample = draw(params, seed=seed)
        got = replay_of().logprobs(sample.logits, sample.prompt, sample.completion, params)
        assert torch.equal(got, torch.tensor(sample.logprobs)), (name, seed)
    if name != "greedy":  # greedy "processed" logprobs skip the temperature: the plain softmax's
        plain = replay_of().logprobs(sample.logits, sample.prompt, sample.completion, SamplingParams())
        assert not torch.equal(plain, got), "the setting must change what the replay computes"


def test_samples_with_their_own_settings_replay_together() -> None:
    params = [
        SamplingParams(max_tokens=64, **SETTINGS[name]) for name in ("min_tokens", "top_p", "everything")
    ]
    samples = [draw(p, seed=i) for i, p in enumerate(params)]
    processed = replay_of().log_softmax(
        torch.cat([s.logits for s in samples]), [(s.prompt, s.completion) for s in samples], params
    )
    tokens = torch.tensor([t for s in samples for t in s.completion])
    expected = torch.tensor([lp for s in samples for lp in s.logprobs])
    assert torch.equal(processed.gather(1, tokens[:, None])[:, 0], expected)


def test_the_processors_change_what_is_replayed() -> None:
    """So that equality above means something: the same tokens without the settings give other logprobs."""
    sample = draw(SamplingParams(max_tokens=64, **SETTINGS["everything"]))
    plain = replay_of().logprobs(sample.logits, sample.prompt, sample.completion, SamplingParams())
    assert not torch.allclose(plain, torch.tensor(sample.logprobs), atol=1e-2)


def test_a_token_the_settings_forbid_is_refused_naming_it() -> None:
    sample = draw(SamplingParams(max_tokens=64), seed=1)
    banned = SamplingParams(bad_words_token_ids=[[sample.completion[0]]])
    with pytest.raises(ValueError, match="forbidden by the settings replayed"):
        replay_of().logprobs(sample.logits, sample.prompt, sample.completion, banned)


def test_logits_of_the_wrong_shape_are_refused() -> None:
    sample = draw(SamplingParams(max_tokens=64))
    with pytest.raises(ValueError, match="one row per completion token"):
        replay_of().logprobs(sample.logits[1:], sample.prompt, sample.completion, SamplingParams())


def test_bad_words_strings_need_the_tokenizer() -> None:
    with pytest.raises(ValueError, match="bad_words"):
        replay_of().prepare(SamplingParams(bad_words=["ab"]))


def test_the_callers_logits_are_never_written() -> None:
    sample = draw(SamplingParams(max_tokens=64, **SETTINGS["everything"]))
    logits = sample.logits.clone()
    replay_of().logprobs(logits, PROMPT, sample.completion, SamplingParams(**SETTINGS["everything"]))
    assert torch.equal(logits, sample.logits)
