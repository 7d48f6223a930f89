"""Returned logprobs equal a teacher-forced forward of prompt + completion (fp32, max abs diff <= 1e-4)."""

import pytest
import torch

from rollout import SamplingParams
from tests.builders import random_prompts, reference_copy, tiny_llm

TOL = 1e-4


def teacher_forced_logits(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Logits that predicted each completion token: [len(completion), vocab]."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    return logits[len(prompt) - 1 : -1]


def processed(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    logits = logits / temperature
    kth = logits.topk(top_k, dim=-1).values[:, -1:]
    return torch.log_softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)


@pytest.mark.parametrize("mode", ["processed", "raw"])
def test_sampled_token_logprobs_equal_teacher_forced_forward(mode: str) -> None:
    llm = tiny_llm("qwen2", seed=5)
    reference = reference_copy(llm.engine.model)
    params = SamplingParams(
        n=3, temperature=0.7, top_k=20, max_tokens=20, seed=0, logprobs=3, logprobs_mode=mode
    )
    for prompt, out in zip(
        random_prompts(3, 5, 40, seed=6), llm.generate(random_prompts(3, 5, 40, seed=6), params), strict=True
    ):
        for sample in out.outputs:
            logits = teacher_forced_logits(reference, prompt, sample.token_ids)
            expected = torch.log_softmax(logits, -1) if mode == "raw" else processed(logits, 0.7, 20)
            got = torch.tensor(sample.logprobs)
            want = expected.gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
            assert (got - want).abs().max().item() <= TOL
            for position, top in enumerate(sample.top_logprobs):
                values, ids = expected[position].topk(3)
                assert sorted(top) == sorted(ids.tolist())
                assert max(abs(top[i] - v) for i, v in zip(ids.tolist(), values.tolist(), strict=True)) <= TOL


def test_greedy_processed_logprobs_are_the_unscaled_log_softmax() -> None:
    llm = tiny_llm("llama", seed=7)
    reference = reference_copy(llm.engine.model)
    prompt = random_prompts(1, 10, 10, seed=8)[0]
    sample = llm.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=12, logprobs=0, ignore_eos=True)
    )[0].outputs[0]
    logits = teacher_forced_logits(reference, prompt, sample.token_ids)
    want = torch.log_softmax(logits, -1).gather(1, torch.tensor(sample.token_ids)[:, None])[:, 0]
    assert (torch.tensor(sample.logprobs) - want).abs().max().item() <= TOL
    assert sample.top_logprobs is None


def test_no_logprobs_requested_returns_none() -> None:
    out = tiny_llm().generate([[5, 6, 7]], SamplingParams(max_tokens=4, seed=1))[0].outputs[0]
    assert out.logprobs is None and out.top_logprobs is None
