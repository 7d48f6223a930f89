"""Returned logprobs equal a teacher-forced forward of prompt + completion (fp32, max abs diff <= 1e-4)."""

import pytest
import torch

from rollout import SamplingParams
from tests.builders import random_prompts, reference_copy, tiny_llm

TOL = 1e-4
FILTERS = {
    "top_k": dict(temperature=0.7, top_k=20),
    "top_p": dict(temperature=0.9, top_p=0.8),
    "min_p": dict(temperature=1.0, min_p=0.1),
    "repetition_penalty": dict(temperature=0.8, repetition_penalty=1.3),
    "combined": dict(temperature=0.8, repetition_penalty=1.2, top_k=30, top_p=0.9, min_p=0.05),
}


def teacher_forced_logits(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Logits that predicted each completion token: [len(completion), vocab]."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    return logits[len(prompt) - 1 : -1]


def processed(
    logits: torch.Tensor, prompt: list[int], completion: list[int], params: SamplingParams
) -> torch.Tensor:
    """[len(completion), vocab] log-probabilities of the distribution each token was drawn from."""
    rows = [processed_row(row, prompt + completion[:t], params) for t, row in enumerate(logits.double())]
    return torch.stack(rows).float()


def processed_row(logits: torch.Tensor, seen: list[int], params: SamplingParams) -> torch.Tensor:
    """The documented order: repetition penalty (transformers' rule, over prompt + output so far), temperature,
    then top-k, top-p and min-p, each on the renormalised survivors of the one before."""
    logits = logits.clone()
    for token in set(seen):
        value = logits[token]
        logits[token] = value / params.repetition_penalty if value > 0 else value * params.repetition_penalty
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_k:
        probs = restrict(probs, probs >= probs.topk(params.top_k).values[-1])
    if params.top_p < 1.0:
        values, ids = probs.sort(descending=True)
        nucleus = ids[values.cumsum(0) - values < params.top_p]  # the mass before a token is still < p
        probs = restrict(probs, torch.isin(torch.arange(len(probs)), nucleus))
    if params.min_p:
        probs = restrict(probs, probs >= params.min_p * probs.max())
    return probs.log()


def restrict(probs: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    kept = probs * keep
    return kept / kept.sum()


def assert_top_logprobs_match(top: dict[int, float], expected: torch.Tensor, k: int, sampled: int) -> None:
    """The k best of `expected` with their values, plus the sampled token when it is not among them
    (as vLLM); slots past the distribution's support hold -inf."""
    assert sampled in top and abs(top[sampled] - expected[sampled].item()) <= TOL
    best = list(top)[:k]
    assert len(top) == k + (sampled not in best)
    values, ids = expected.topk(min(k, int(expected.isfinite().sum())))
    for token, value in zip(ids.tolist(), values.tolist(), strict=True):
        assert token in best and abs(top[token] - value) <= TOL, (token, top, value)
    assert all(top[token] == float("-inf") for token in best if token not in ids.tolist())


@pytest.mark.parametrize(
    "mode, filters",
    [*(("processed", name) for name in FILTERS), ("raw", "combined")],
)
def test_sampled_token_logprobs_equal_teacher_forced_forward(mode: str, filters: str) -> None:
    llm = tiny_llm("qwen2", seed=5)
    reference = reference_copy(llm.engine.model)
    params = SamplingParams(n=3, max_tokens=20, seed=0, logprobs=3, logprobs_mode=mode, **FILTERS[filters])
    prompts = random_prompts(3, 5, 40, seed=6)
    for prompt, out in zip(prompts, llm.generate(prompts, params), strict=True):
        for sample in out.outputs:
            logits = teacher_forced_logits(reference, prompt, sample.token_ids)
            if mode == "raw":
                expected = torch.log_softmax(logits, -1)
            else:
                expected = processed(logits, prompt, sample.token_ids, params)
            got = torch.tensor(sample.token_logprobs)
            want = expected.gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
            assert (got - want).abs().max().item() <= TOL
            for position, top in enumerate(sample.top_logprobs):
                assert_top_logprobs_match(top, expected[position], 3, sample.token_ids[position])


def test_greedy_processed_logprobs_are_the_unscaled_log_softmax() -> None:
    llm = tiny_llm("llama", seed=7)
    reference = reference_copy(llm.engine.model)
    prompt = random_prompts(1, 10, 10, seed=8)[0]
    sample = llm.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=12, logprobs=0, ignore_eos=True)
    )[0].outputs[0]
    logits = teacher_forced_logits(reference, prompt, sample.token_ids)
    want = torch.log_softmax(logits, -1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
    assert (torch.tensor(sample.token_logprobs) - want).abs().max().item() <= TOL
    assert sample.top_logprobs is None


def test_no_logprobs_requested_returns_none() -> None:
    out = tiny_llm().generate([[5, 6, 7]], SamplingParams(max_tokens=4, seed=1))[0].outputs[0]
    assert out.logprobs is None and out.top_logprobs is None


def test_samples_of_long_prompts_attend_through_the_cascade_exactly() -> None:
    """n samples of 100-token prompts share 25 blocks of 4: without the compiled decode kernel, decode
    takes the cascade path, and every sampled token's logprob still equals a teacher-forced forward."""
    llm = tiny_llm(block_size=4, num_blocks=512)
    attention = llm.engine.runner.backend.paged_attention
    attention._kernels = None  # the CPU backend's path where no C++ compiler is found
    plans = []
    plan = attention._plan

    def recording_plan(*args, **kwargs):
        plan(*args, **kwargs)
        plans.append(attention._cascade is not None)

    attention._plan = recording_plan
    reference = reference_copy(llm.engine.model)
    prompts = random_prompts(2, 96, 104, seed=5)
    params = SamplingParams(n=4, max_tokens=6, temperature=1.0, seed=3, logprobs=0, ignore_eos=True)
    for prompt, output in zip(prompts, llm.generate(prompts, params), strict=True):
        for sample in output.outputs:
            logits = teacher_forced_logits(reference, prompt, list(sample.token_ids))
            expected = logits.log_softmax(-1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
            assert (torch.tensor(sample.token_logprobs) - expected).abs().max().item() <= TOL
    assert any(plans)


def test_the_sampled_token_is_listed_in_top_logprobs_even_outside_the_top_k() -> None:
    """vLLM's shape: logprobs=k gives the top k plus the sampled token (k + 1 entries when it is not
    among them), with exactly the logprob returned for it."""
    params = SamplingParams(n=4, max_tokens=16, temperature=2.0, seed=3, logprobs=1, ignore_eos=True)
    samples = [
        s for out in tiny_llm().generate(random_prompts(4, 5, 20, seed=4), params) for s in out.outputs
    ]
    rows = [
        (token, logprob, top)
        for s in samples
        for token, logprob, top in zip(s.token_ids, s.token_logprobs, s.top_logprobs, strict=True)
    ]
    assert all(top[token] == logprob for token, logprob, top in rows)
    assert {len(top) for _, _, top in rows} == {1, 2}  # at temperature 2 some draws miss the top 1
