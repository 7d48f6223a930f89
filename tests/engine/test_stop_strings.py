"""Stop strings and text through the offline engine: vLLM's meaning, the sampled tokens kept exactly.

A sample stopped by a string holds exactly the tokens (and logprobs) the same seed samples without
the string, up to the token that completed it; nothing is left allocated.
"""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import random_prompts, tiny_model
from tests.detokenize.tokenizer_builders import PIECES, piece_tokenizer

PROMPTS = random_prompts(4, 4, 12, seed=3)


def make_llm(seed: int = 0, tokenizer: object | None = None) -> LLM:
    return LLM(
        model=tiny_model("llama", seed),
        tokenizer=tokenizer or piece_tokenizer(),
        config=EngineConfig(num_blocks=256),
    )


def sampled(llm: LLM, **params: object):
    base = dict(n=3, max_tokens=24, seed=7, logprobs=0, ignore_eos=True)
    return [o.outputs for o in llm.generate(PROMPTS, SamplingParams(**{**base, **params}))]


def first_hit(text_pieces: list[str], stop: str) -> int | None:
    """Index of the token whose text completes the first occurrence of `stop`."""
    text = ""
    for i, piece in enumerate(text_pieces):
        text += piece
        if stop in text:
            return i
    return None


@pytest.mark.parametrize("stop", ["a", "ce", "<think>", "ja"])
def test_a_stop_string_ends_the_sample_at_the_token_that_completes_it(stop: str) -> None:
    llm = make_llm()
    free = llm.stats()["num_blocks_free"]
    full, cut = sampled(llm), sampled(llm, stop=[stop])
    stopped = 0
    for full_samples, cut_samples in zip(full, cut, strict=True):
        for whole, sample in zip(full_samples, cut_samples, strict=True):
            hit = first_hit([PIECES[t] for t in whole.token_ids], stop)
            end = len(whole.token_ids) if hit is None else hit + 1
            assert sample.token_ids == whole.token_ids[:end]
            # the same draws; the forward pass of a smaller batch may differ in the last fp32 bit
            assert sample.token_logprobs == pytest.approx(whole.token_logprobs[:end], abs=1e-5)
            if hit is None:
                assert (sample.finish_reason, sample.stop_reason, sample.text) == ("length", None, whole.text)
                continue
            stopped += 1
            assert (sample.finish_reason, sample.stop_reason) == ("stop", stop)
            assert sample.text == whole.text[: whole.text.index(stop)]
    assert stopped > 0  # the strings were chosen so that some samples meet them
    assert llm.stats()["num_blocks_free"] == free


def test_no_stop_string_ends_a_sample_before_min_tokens() -> None:
    """vLLM's rule: the text of the first min_tokens output tokens is not searched for stop strings."""
    llm = make_llm()
    early = [s for samples in sampled(llm, stop=["a"]) for s in samples if s.finish_reason == "stop"]
    assert any(len(s.token_ids) < 6 for s in early)  # without min_tokens some stop within 5 tokens
    held = [s for samples in sampled(llm, stop=["a"], min_tokens=6) for s in samples]
    assert all(len(s.token_ids) >= 6 for s in held)
    assert any(s.finish_reason == "stop" and s.stop_reason == "a" for s in held)


def test_include_stop_str_in_output_keeps_the_string_and_only_it() -> None:
    llm = make_llm()
    full, kept = sampled(llm), sampled(llm, stop=["ce"], include_stop_str_in_output=True)
    stopped = [(w, s) for w, s in zip(sum(full, []), sum(kept, []), strict=True) if s.stop_reason == "ce"]
    assert stopped
    for whole, sample in stopped:
        assert sample.text == whole.text[: whole.text.index("ce") + 2]


def test_stop_reason_names_the_stop_token_and_is_none_for_eos() -> None:
    llm = make_llm()
    whole = sampled(llm, n=1)[0][0]
    token = whole.token_ids[2]
    by_token = sampled(llm, n=1, stop_token_ids=[token])[0][0]
    assert (by_token.finish_reason, by_token.stop_reason) == ("stop", token)
    llm.engine.eos_token_ids = frozenset({token})
    by_eos = sampled(llm, n=1, ignore_eos=False)[0][0]
    assert (by_eos.finish_reason, by_eos.stop_reason) == ("stop", None)


def test_cumulative_logprob_is_the_sum_of_the_returned_logprobs_and_none_without_them() -> None:
    llm = make_llm()
    for sample in sum(sampled(llm, stop=["a"]), []):
        assert sample.cumulative_logprob == pytest.approx(sum(sample.token_logprobs), abs=1e-9)
    assert all(s.cumulative_logprob is None for s in sum(sampled(llm, logprobs=None), []))


def test_detokenize_false_returns_no_text_and_the_same_tokens() -> None:
    llm = make_llm()
    with_text, without = sampled(llm), sampled(llm, detokenize=False)
    for a, b in zip(sum(with_text, []), sum(without, []), strict=True):
        assert a.token_ids == b.token_ids and a.text is not None and b.text is None


def test_a_stop_string_without_a_tokenizer_is_refused_naming_stop() -> None:
    llm = LLM(model=tiny_model("llama", 0), config=EngineConfig(num_blocks=64))
    assert llm.tokenizer is None
    with pytest.raises(ValueError, match="^stop: "):
        llm.generate([PROMPTS[0]], SamplingParams(stop=["a"]))
    assert not llm.engine.has_unfinished_requests()


@pytest.mark.parametrize(
    ("value", "match"), [([""], "empty stop string"), ([3], "strings"), (["a"], "detokenize")]
)
def test_bad_stop_values_are_refused_naming_stop(value: list, match: str) -> None:
    with pytest.raises(ValueError, match=f"^stop.*{match}"):
        SamplingParams(stop=value, detokenize=match != "detokenize")
