"""Sampling draws from the softmax distribution, honours the filters and is reproducible per seed."""

import pytest
import torch

from rollout import SamplingParams
from tests.builders import random_prompts, reference_copy, tiny_llm

SMALL_VOCAB = {"vocab_size": 16, "bos_token_id": 1, "eos_token_id": 2}
PROMPT = [3, 4, 5, 6]
DRAWS = 3000  # n samples of one prompt: independent first tokens from one set of logits
# 0.999 quantiles of the chi-square distribution with 1..15 degrees of freedom (16-token vocabulary)
# fmt: off
CHI2_999 = (10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12,
            27.88, 29.59, 31.26, 32.91, 34.53, 36.12, 37.70)
# fmt: on


def small_vocab_llm():
    return tiny_llm(model_overrides=SMALL_VOCAB, max_num_seqs=DRAWS, num_blocks=DRAWS + 100, seed=0)


def first_token_logits(llm) -> torch.Tensor:
    reference = reference_copy(llm.engine.model)
    with torch.no_grad():
        return reference(torch.tensor([PROMPT])).logits[0, -1].float()


def truncated_softmax(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0
) -> torch.Tensor:
    """The documented pipeline in plain torch: temperature, then top-k, top-p and min-p in that order,
    each applied to the renormalised output of the one before."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_k:
        probs = restrict(probs, probs >= probs.topk(top_k).values[-1])
    if top_p < 1.0:
        values, ids = probs.sort(descending=True)
        mass_before = values.cumsum(0) - values
        probs = restrict(probs, torch.isin(torch.arange(len(probs)), ids[mass_before < top_p]))
    if min_p:
        probs = restrict(probs, probs >= min_p * probs.max())
    return probs


def restrict(probs: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    kept = probs * keep
    return kept / kept.sum()


def first_tokens(llm, params: SamplingParams) -> list[int]:
    return [c.token_ids[0] for c in llm.generate([PROMPT], params)[0].outputs]


def assert_drawn_from(tokens: list[int], probs: torch.Tensor) -> None:
    """The observed support is exactly probs' support, and Pearson's chi-square test accepts the counts."""
    support = torch.nonzero(probs)[:, 0]
    # every token of the support is drawn, except with negligible probability; and >= 5 expected per bin
    assert ((1 - probs[support]) ** len(tokens)).sum() < 1e-9
    assert set(tokens) == set(support.tolist())
    observed = torch.bincount(torch.tensor(tokens), minlength=len(probs)).double()[support]
    expected = probs[support] * len(tokens)
    chi2 = ((observed - expected) ** 2 / expected).sum().item()
    threshold = CHI2_999[len(support) - 2]
    assert chi2 < threshold, f"chi2={chi2:.1f} observed={observed.tolist()} expected={expected.tolist()}"


@pytest.mark.parametrize("seed", [None, 123], ids=["engine-seed", "request-seed"])
def test_sampling_frequencies_match_the_softmax_distribution(seed: int | None) -> None:
    llm = small_vocab_llm()
    probs = truncated_softmax(first_token_logits(llm), temperature=1.5)
    # a seeded request gives each of its n samples its own stream, so the draws are independent
    tokens = first_tokens(llm, SamplingParams(n=DRAWS, max_tokens=1, temperature=1.5, seed=seed))
    assert_drawn_from(tokens, probs)


@pytest.mark.parametrize(
    "params",
    [
        dict(temperature=2.0, top_k=3),
        dict(temperature=2.0, top_p=0.5),
        dict(temperature=2.0, min_p=0.3),
        # top-p binds only on the renormalised top-k distribution: checks the order as well
        dict(temperature=0.8, top_k=6, top_p=0.85, min_p=0.05),
    ],
    ids=["top_k", "top_p", "min_p", "combined"],
)
def test_truncation_filters_sample_the_renormalised_truncated_softmax(params: dict) -> None:
    llm = small_vocab_llm()
    probs = truncated_softmax(first_token_logits(llm), **params)
    tokens = first_tokens(llm, SamplingParams(n=DRAWS, max_tokens=1, seed=1, **params))
    assert_drawn_from(tokens, probs)


def test_same_seed_gives_same_tokens_whatever_else_is_in_the_batch() -> None:
    params = SamplingParams(n=3, max_tokens=16, temperature=1.0, seed=42)
    target = random_prompts(1, 30, 30, seed=1)[0]
    alone = tiny_llm(seed=4).generate([target], params)[0]
    others = random_prompts(6, 5, 80, seed=2)
    mixed_llm = tiny_llm(seed=4)
    mixed = mixed_llm.generate(others[:3] + [target] + others[3:], SamplingParams(n=2, max_tokens=20, seed=7))
    mixed_target = mixed_llm.generate(others[:2] + [target], params)[2]
    assert [c.token_ids for c in alone.outputs] == [c.token_ids for c in mixed_target.outputs]
    assert len(mixed) == 7


def test_repetition_penalty_matches_transformers_generate() -> None:
    llm = tiny_llm("llama", seed=6)
    reference = reference_copy(llm.engine.model)
    prompt = random_prompts(1, 12, 12, seed=3)[0]
    params = SamplingParams(temperature=0, max_tokens=20, repetition_penalty=1.8, ignore_eos=True)
    got = llm.generate([prompt], params)[0].outputs[0].token_ids
    want = reference.generate(
        torch.tensor([prompt]),
        max_new_tokens=20,
        do_sample=False,
        repetition_penalty=1.8,
        eos_token_id=None,
        pad_token_id=0,
    )[0, len(prompt) :].tolist()
    assert got == want
