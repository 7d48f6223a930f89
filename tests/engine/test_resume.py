"""Lossless resume: an aborted sample continued under the current weights equals an uninterrupted run,
max_tokens counts its tokens, cached blocks of the current version are reused, and a bad partial is
refused before anything is queued."""

from dataclasses import replace

import pytest
import torch

from rollout import SamplingParams
from rollout.outputs import PartialSample
from tests.builders import random_prompts, tiny_llm, tiny_model
from tests.engine.in_flight_builders import output_len, step_until

PARAMS = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True, logprobs=0, n=2)
# Seeded noise is a function of (seed, sample index, position) (sampling_noise.py): resume is exact too.
SEEDED = SamplingParams(temperature=1.0, top_k=20, seed=7, max_tokens=20, ignore_eos=True, logprobs=0, n=2)
# The penalties count the partial's tokens as output (the sequence's kept counts: token_counts.py).
PENALIZED = replace(SEEDED, repetition_penalty=1.5, frequency_penalty=0.5, presence_penalty=-0.4)


def aborted_after(llm, prompt: list[int], num_tokens: int, in_flight: str | None = None, params=PARAMS):
    """Runs `prompt` until it has `num_tokens` tokens, aborts it (or updates with `in_flight`="abort"),
    and returns its RequestOutput of partial samples."""
    engine = llm.engine
    engine.add_request("r", prompt, params)
    step_until(engine, {}, lambda: output_len(engine, "r") == num_tokens)
    if in_flight is None:
        engine.abort_request("r")
    else:
        engine.update_weights(tiny_model(seed=1).state_dict(), in_flight=in_flight)
    (out,) = engine.step()
    assert all(s.finish_reason == "abort" and len(s.token_ids) == num_tokens for s in out.outputs)
    return out


@pytest.mark.parametrize("params", [PARAMS, SEEDED, PENALIZED], ids=["greedy", "seeded", "penalized"])
def test_abort_then_resume_with_unchanged_weights_equals_an_uninterrupted_run(params) -> None:
    prompt = random_prompts(1, 20, 20, seed=1)[0]
    llm = tiny_llm(seed=0, block_size=16)
    (whole,) = llm.generate([prompt], params)
    partial = aborted_after(llm, prompt, 14, params=params)
    hits = llm.stats()["num_prefix_hit_tokens"]
    (resumed,) = llm.resume_aborted([partial], params)
    for got, want in zip(resumed.outputs, whole.outputs, strict=True):
        assert (got.index, got.token_ids, got.finish_reason) == (want.index, want.token_ids, "length")
        torch.testing.assert_close(
            torch.tensor(got.token_logprobs), torch.tensor(want.token_logprobs), atol=1e-5, rtol=0
        )
        torch.testing.assert_close(
            torch.tensor(got.kept_log_mass), torch.tensor(want.kept_log_mass), atol=1e-5, rtol=0
        )
        assert got.weight_versions == got.kv_versions == [(0, 0)]
    # each resumed sample found the blocks of prompt + partial completion cached (2 full blocks of 16)
    assert llm.stats()["num_prefix_hit_tokens"] - hits == 2 * 32
    assert llm.stats()["num_blocks_free"] == llm.stats()["num_blocks_total"]


def test_resume_after_an_update_continues_like_a_fresh_engine_and_keeps_the_old_spans() -> None:
    prompt = random_prompts(1, 20, 20, seed=2)[0]
    llm = tiny_llm(seed=0, block_size=16)
    partial = aborted_after(llm, prompt, 14, in_flight="abort")
    hits = llm.stats()["num_prefix_hit_tokens"]
    (resumed,) = llm.resume_aborted([partial], PARAMS)
    head = partial.outputs[0].token_ids
    single = SamplingParams(temperature=0, max_tokens=20 - 14, ignore_eos=True)
    fresh = tiny_llm(seed=1).generate([prompt + head], single)[0].outputs[0].token_ids
    for sample in resumed.outputs:
        assert (
            sample.token_ids == head + fresh and len(sample.token_logprobs) == len(sample.kept_log_mass) == 20
        )
        assert sample.weight_versions == [(0, 0), (14, 1)] and sample.weight_version == 0
        assert sample.kv_versions == [(0, 0), (14, 1)]
    assert llm.stats()["num_prefix_hit_tokens"] == hits  # nothing cached under version 0 is reused


@pytest.mark.parametrize(
    ("partial", "params", "field"),
    [
        (
            PartialSample(0, [5] * 20, [0.0] * 20, None, [(0, 0)], [(0, 0)]),
            SamplingParams(max_tokens=20),
            "max_tokens",
        ),
        (
            PartialSample(0, [5, 6], None, None, [(0, 0)], [(0, 0)]),
            SamplingParams(logprobs=0),
            "resume.logprobs",
        ),
        (
            PartialSample(0, [5, 6], [0.0, 0.0], None, [(0, 0)], [(0, 0)]),
            SamplingParams(logprobs=0),
            "resume.kept_log_mass",
        ),
        (
            PartialSample(0, [5, 6], [0.0, 0.0], None, [(0, 0)], [(0, 0)], [0.0, 0.0], [[5]]),
            SamplingParams(logprobs=0, return_kept_tokens=True),
            "resume.kept_token_ids",
        ),
        (PartialSample(0, [5, 6], [0.0, 0.0], None, [(1, 0)], [(0, 0)]), SamplingParams(), "weight_versions"),
        (PartialSample(0, [5, 6], [0.0, 0.0], None, [(0, 0)], [(0, 0)]), SamplingParams(n=2), "n must be 1"),
        (PartialSample(0, [5, 2], [0.0, 0.0], None, [(0, 0)], [(0, 0)]), SamplingParams(), "stop token"),
    ],
)
def test_a_partial_that_cannot_be_resumed_is_refused_naming_the_field(partial, params, field: str) -> None:
    engine = tiny_llm(seed=0).engine
    with pytest.raises(ValueError, match=field):
        engine.add_request("r", [3, 4, 5], params, resume=partial)
    assert not engine.has_unfinished_requests()


@pytest.mark.parametrize(
    ("partial", "field"),
    [
        (
            PartialSample(0, [5, 6], [0.0, float("nan")], None, [(0, 0)], [(0, 0)], [0.0, 0.0]),
            r"logprobs\[1\]",
        ),
        (
            PartialSample(0, [5, 6], [float("inf"), 0.0], None, [(0, 0)], [(0, 0)], [0.0, 0.0]),
            r"logprobs\[0\]",
        ),
        (
            PartialSample(0, [5, 6], [float("-inf"), 0.0], None, [(0, 0)], [(0, 0)], [0.0, 0.0]),
            r"logprobs\[0\]",
        ),
        (PartialSample(0, [5, 6], [-1.0, 5.0], None, [(0, 0)], [(0, 0)], [0.0, 0.0]), r"logprobs\[1\]"),
        (PartialSample(0, [5, 6], [-1.0, -2.0], None, [(0, 0)], [(0, 0)], [0.5, 0.0]), r"kept_log_mass\[0\]"),
        (
            PartialSample(0, [5, 6], [-1.0, -2.0], None, [(0, 0)], [(0, 0)], [0.0, float("nan")]),
            "kept_log_mass",
        ),
    ],
)
def test_a_partial_with_impossible_log_probabilities_is_refused(partial: PartialSample, field: str) -> None:
    """A sampled token's log probability is finite and <= 0; the engine would echo anything else back."""
    engine = tiny_llm(seed=0).engine
    with pytest.raises(ValueError, match=f"resume.{field}.*log probability <= 0"):
        engine.add_request("r", [3, 4, 5], SamplingParams(logprobs=0, max_tokens=4), resume=partial)
    assert not engine.has_unfinished_requests()


@pytest.mark.parametrize(
    ("top", "match"),
    [
        ({7: float("nan")}, r"top_logprobs\[1\]\[7\]"),
        ({7: 0.25}, r"top_logprobs\[1\]\[7\]"),
        ({128: -1.0}, "128"),
    ],
)
def test_a_partial_with_impossible_top_logprobs_is_refused(top: dict[int, float], match: str) -> None:
    """A top-k alternative may be -inf (dropped by the filters), never NaN, above 0, or outside the vocabulary."""
    engine = tiny_llm(seed=0).engine
    tops = [{5: -0.1, 9: float("-inf")}, {6: -0.2, **top}]
    partial = PartialSample(0, [5, 6], [-0.1, -0.2], tops, [(0, 0)], [(0, 0)], [0.0, 0.0])
    with pytest.raises(ValueError, match=match):
        engine.add_request("r", [3, 4, 5], SamplingParams(logprobs=2, max_tokens=4), resume=partial)
    ok = PartialSample(
        0, [5, 6], [-0.1, -0.2], [tops[0], {6: -0.2, 7: float("-inf")}], [(0, 0)], [(0, 0)], [0.0, 0.0]
    )
    engine.add_request("ok", [3, 4, 5], SamplingParams(logprobs=2, max_tokens=4), resume=ok)
