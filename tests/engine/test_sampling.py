"""Sampling draws from the softmax distribution, honours the filters and is reproducible per seed."""

import pytest
import torch

from rollout import SamplingParams
from tests.builders import random_prompts, reference_copy, tiny_llm

SMALL_VOCAB = {"vocab_size": 16, "bos_token_id": 1, "eos_token_id": 2}
PROMPT = [3, 4, 5, 6]


def first_token_distribution(llm, temperature: float) -> torch.Tensor:
    reference = reference_copy(llm.engine.model)
    with torch.no_grad():
        logits = reference(torch.tensor([PROMPT])).logits[0, -1].float()
    return torch.softmax(logits / temperature, dim=-1)


def first_tokens(llm, params: SamplingParams, prompts: int = 2) -> list[int]:
    outs = llm.generate([PROMPT] * prompts, params)
    return [c.token_ids[0] for out in outs for c in out.outputs]


@pytest.mark.parametrize("seed", [None, 123], ids=["engine-seed", "request-seed"])
def test_sampling_frequencies_match_the_softmax_distribution(seed: int | None) -> None:
    llm = tiny_llm(model_overrides=SMALL_VOCAB, max_num_seqs=2048, num_blocks=2100, seed=0)
    probs = first_token_distribution(llm, temperature=1.5)
    tokens = first_tokens(llm, SamplingParams(n=1000, max_tokens=1, temperature=1.5, seed=seed))
    observed = torch.bincount(torch.tensor(tokens), minlength=16).double()
    expected = probs.double() * len(tokens)
    keep = expected >= 5  # pool rare tokens, the chi-square rule of thumb
    obs = torch.cat([observed[keep], observed[~keep].sum()[None]])
    exp = torch.cat([expected[keep], expected[~keep].sum()[None]])
    chi2 = ((obs - exp) ** 2 / exp.clamp_min(1e-9)).sum().item()
    # 0.999 quantile of chi-square with <= 15 degrees of freedom is 37.7
    assert chi2 < 37.7, f"chi2={chi2:.1f} observed={observed.tolist()} expected={expected.tolist()}"


@pytest.mark.parametrize(
    "params, allowed",
    [
        (dict(top_k=3), lambda p: set(p.topk(3).indices.tolist())),
        (dict(top_p=0.5), lambda p: nucleus(p, 0.5)),
        (dict(min_p=0.3), lambda p: set(torch.nonzero(p >= 0.3 * p.max())[:, 0].tolist())),
    ],
    ids=["top_k", "top_p", "min_p"],
)
def test_truncation_filters_restrict_the_support(params: dict, allowed) -> None:
    llm = tiny_llm(model_overrides=SMALL_VOCAB, max_num_seqs=512, num_blocks=600)
    probs = first_token_distribution(llm, temperature=2.0)
    tokens = set(first_tokens(llm, SamplingParams(n=200, max_tokens=1, temperature=2.0, seed=1, **params)))
    assert tokens <= allowed(probs)
    assert len(tokens) == len(allowed(probs)) or len(allowed(probs)) > 4


def nucleus(probs: torch.Tensor, p: float) -> set[int]:
    values, ids = probs.sort(descending=True)
    before = values.cumsum(0) - values
    return set(ids[before < p].tolist())


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
