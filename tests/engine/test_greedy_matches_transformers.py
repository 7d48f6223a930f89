"""Greedy decoding through the paged engine equals transformers' `generate`, token for token (fp32)."""

import pytest
import torch

from rollout import SamplingParams
from tests.builders import ARCHITECTURES, random_prompts, reference_copy, tiny_llm


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[0, len(prompt) :].tolist()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_equals_transformers_generate_with_mixed_prompt_lengths(arch: str) -> None:
    llm = tiny_llm(arch, seed=1)
    reference = reference_copy(llm.engine.model)
    prompts = random_prompts(5, 1, 70, seed=2)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.outputs[0].token_ids == hf_greedy(reference, prompt, 24)
        assert out.outputs[0].finish_reason == "length"


def test_sliding_window_model_matches_transformers() -> None:
    llm = tiny_llm("mistral", seed=3, model_overrides={"sliding_window": 8})
    reference = reference_copy(llm.engine.model)
    reference.set_attn_implementation("sdpa")
    prompts = random_prompts(3, 20, 40, seed=4)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.outputs[0].token_ids == hf_greedy(reference, prompt, 16)
