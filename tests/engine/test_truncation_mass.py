"""Kept probability mass: processed logprob + kept_log_mass is the untruncated temperature-scaled logprob.

Oracle: the kept set is rebuilt here from the definitions (k largest; smallest prefix of the sorted
distribution reaching p; tokens with p >= min_p * max), and its mass summed in float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from rollout import SamplingParams
from rollout.engine.sample.sampler import Sampler, SampleRow
from rollout.engine.sample.truncation_mass import logsumexp
from rollout.ops.workspace import Workspace
from tests.builders import tiny_llm

VOCAB = 300


def kept_set(probs: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Boolean [vocab] of the tokens top-k, then top-p, then min-p keep (each on the survivors' renormalised p)."""
    keep = torch.ones_like(probs, dtype=torch.bool)
    if params.top_k:
        keep[probs.argsort(descending=True)[params.top_k :]] = False
    if params.top_p < 1.0:
        p = torch.where(keep, probs, 0.0) / torch.where(keep, probs, 0.0).sum()
        order = p.argsort(descending=True)
        before = p[order].cumsum(0) - p[order]
        keep[order[before >= params.top_p]] = False
    if params.min_p > 0.0:
        p = torch.where(keep, probs, 0.0) / torch.where(keep, probs, 0.0).sum()
        keep &= p >= params.min_p * p.max()
    return keep


CASES = [
    SamplingParams(temperature=0.8, top_k=7, logprobs=0),
    SamplingParams(temperature=1.3, top_p=0.6, logprobs=0),
    SamplingParams(temperature=1.0, min_p=0.2, logprobs=0),
    SamplingParams(temperature=0.9, top_k=40, top_p=0.8, min_p=0.05, logprobs=1, logprobs_mode="raw"),
]


@pytest.mark.parametrize("params", CASES, ids=["top_k", "top_p", "min_p", "all_three_raw"])
def test_kept_log_mass_is_the_log_of_the_kept_untruncated_probability(params: SamplingParams) -> None:
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(3)) * 2
    rows = [SampleRow(params, torch.Generator().manual_seed(i), []) for i in range(4)]
    out = Sampler(seed=0)(logits, rows)
    for i in range(4):
        probs = (logits[i].double() / params.temperature).softmax(-1)
        expected = math.log(probs[kept_set(probs, params)].sum().item())
        assert expected < -0.01  # the filters really cut something
        assert out.kept_log_masses[i] == pytest.approx(expected, abs=1e-5)
        if params.logprobs_mode != "raw_logprobs":  # None: the default, processed_logprobs
            untruncated = math.log(probs[out.token_ids[i]].item())
            assert out.logprobs[i] + out.kept_log_masses[i] == pytest.approx(untruncated, abs=1e-5)


def test_kept_log_mass_is_zero_without_truncation_and_absent_without_logprobs() -> None:
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(4))
    params = [
        SamplingParams(temperature=0.7, logprobs=0),
        SamplingParams(temperature=0, top_k=3, logprobs=0),  # greedy ignores the filters
        SamplingParams(temperature=0.7, top_k=3),
    ]
    rows = [SampleRow(p, None, []) for p in params]
    out = Sampler(seed=0)(logits, rows)
    assert out.kept_log_masses == [0.0, 0.0, None]
    alone = Sampler(seed=0)(logits[2:], rows[2:])
    assert alone.kept_log_masses is None


def test_kept_log_mass_reaches_the_completion_one_per_token() -> None:
    llm = tiny_llm()
    params = SamplingParams(n=2, max_tokens=6, temperature=5.0, top_k=5, seed=0, logprobs=0, ignore_eos=True)
    sample = llm.generate([[5, 6, 7]], params)[0].outputs[0]
    assert len(sample.kept_log_mass) == len(sample.token_logprobs) == 6
    assert all(m < 0 for m in sample.kept_log_mass)
    no_cut = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, seed=0, logprobs=0, ignore_eos=True))
    assert no_cut[0].outputs[0].kept_log_mass == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("params", CASES, ids=["top_k", "top_p", "min_p", "all_three_raw"])
def test_kept_token_ids_on_request_are_the_truncated_support(params: SamplingParams) -> None:
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(6)) * 2
    asked = SamplingParams(**{**params.__dict__, "return_kept_tokens": True})
    rows = [SampleRow(p, torch.Generator().manual_seed(i), []) for i, p in enumerate([asked, params, asked])]
    out = Sampler(seed=0)(logits, rows)
    assert out.kept_token_ids[1] is None
    for i in (0, 2):
        probs = (logits[i].double() / params.temperature).softmax(-1)
        assert out.kept_token_ids[i] == kept_set(probs, params).nonzero()[:, 0].tolist()
        assert out.token_ids[i] in out.kept_token_ids[i]


def test_return_kept_tokens_is_validated() -> None:
    with pytest.raises(ValueError, match="return_kept_tokens"):
        SamplingParams(return_kept_tokens="yes")


def test_the_workspace_logsumexp_is_torchs_bit_for_bit() -> None:
    """Scales from 0.01 to 100, -inf tokens and rows, +inf, NaN and the fp32 extremes."""
    generator = torch.Generator().manual_seed(0)
    for case in range(60):
        rows, vocab = 1 + case % 5, 1 + 97 * case
        values = torch.randn(rows, vocab, generator=generator) * 10 ** (case % 5 - 2)
        values[torch.rand(rows, vocab, generator=generator) < 0.3] = -math.inf
        special = [-math.inf, math.inf, math.nan, 3.0e38][case % 4]
        values[0, : case % 3] = special if case % 4 else -math.inf
        values[-1] = -math.inf if case % 6 == 0 else values[-1]
        mine, theirs = logsumexp(values, Workspace()), torch.logsumexp(values, dim=-1)
        assert torch.equal(mine.nan_to_num(), theirs.nan_to_num()) and torch.equal(
            mine.isnan(), theirs.isnan()
        )
