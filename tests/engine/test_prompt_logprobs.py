"""Prompt logprobs and LLM.score: every prompt token covered, equal to transformers' teacher-forced
forward, under chunked prefill, a prefix-cache hit and preemption."""

from __future__ import annotations

import pytest
import torch

from rollout import SamplingParams
from tests.builders import random_prompts, reference_copy, tiny_llm


def teacher_forced(llm, ids: list[int]) -> torch.Tensor:
    """log p(ids[i + 1] | ids[: i + 1]) from the model's own eager forward, fp32."""
    with torch.no_grad():
        logits = reference_copy(llm.engine.model)(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]


def assert_matches_forward(llm, prompt: list[int], entries: list) -> None:
    assert len(entries) == len(prompt) and entries[0] is None
    got = torch.tensor([entry[token] for entry, token in zip(entries[1:], prompt[1:], strict=True)])
    torch.testing.assert_close(got, teacher_forced(llm, prompt), rtol=0, atol=1e-4)


def test_prompt_logprobs_have_vllms_shape() -> None:
    llm = tiny_llm()
    prompt = [5, 6, 7, 8, 9]
    entries = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=3))[0].prompt_logprobs
    assert entries[0] is None
    for entry, token in zip(entries[1:], prompt[1:], strict=True):
        assert token in entry and len(entry) in (3, 4)  # the top 3, plus the prompt token if not among them
    assert llm.generate([prompt], SamplingParams(max_tokens=1))[0].prompt_logprobs is None


def test_prompt_logprobs_equal_a_teacher_forced_forward_under_chunked_prefill() -> None:
    llm = tiny_llm(max_num_batched_tokens=16, block_size=4)  # 20-60 token prompts in several chunks
    prompts = random_prompts(4, 20, 60, seed=1)
    outs = llm.generate(prompts, SamplingParams(max_tokens=2, prompt_logprobs=0))
    for prompt, out in zip(prompts, outs, strict=True):
        assert_matches_forward(llm, prompt, out.prompt_logprobs)


def test_a_prefix_cache_hit_still_covers_every_prompt_token_and_the_cache_is_shared() -> None:
    llm = tiny_llm(block_size=4)
    prompt = random_prompts(1, 30, 30, seed=2)[0]
    llm.generate([prompt], SamplingParams(max_tokens=1))  # fills the cache
    hits = llm.stats()["num_prefix_hit_tokens"]
    out = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=0))[0]
    assert llm.stats()["num_prefix_hit_tokens"] == hits  # cached blocks were recomputed, not read
    assert_matches_forward(llm, prompt, out.prompt_logprobs)
    llm.generate([prompt], SamplingParams(max_tokens=1))
    assert llm.stats()["num_prefix_hit_tokens"] > hits  # other requests still hit what it computed


def test_prompt_logprobs_survive_preemption_exactly() -> None:
    # 12 blocks of 16 cannot hold four 40-token prompts growing to 80 tokens: preemption recomputes
    llm = tiny_llm(num_blocks=12, max_model_len=128, max_num_batched_tokens=32)
    prompts = random_prompts(4, 40, 40, seed=3)
    outs = llm.generate(prompts, SamplingParams(max_tokens=40, ignore_eos=True, prompt_logprobs=0))
    assert llm.stats()["num_preemptions"] > 0
    for prompt, out in zip(prompts, outs, strict=True):
        assert_matches_forward(llm, prompt, out.prompt_logprobs)
    assert llm.stats()["num_blocks_free"] == llm.stats()["num_blocks_total"]


def test_score_equals_a_teacher_forced_forward_and_frees_every_block() -> None:
    llm = tiny_llm(max_num_batched_tokens=32)
    sequences = random_prompts(5, 1, 70, seed=4)
    scores = llm.score(sequences, top_logprobs=2)
    for seq, score in zip(sequences, scores, strict=True):
        assert score.token_ids == seq and len(score.logprobs) == len(seq) - 1
        if len(seq) > 1:
            torch.testing.assert_close(
                torch.tensor(score.logprobs), teacher_forced(llm, seq), rtol=0, atol=1e-4
            )
        assert all(token in top for token, top in zip(seq[1:], score.top_logprobs, strict=True))
    assert llm.stats()["num_blocks_free"] == llm.stats()["num_blocks_total"]


@pytest.mark.parametrize(
    ("args", "field"),
    [(([],), "token_ids_list"), (([[5], []],), r"token_ids_list\[1\]"), (([[5]], -1), "top_logprobs")],
)
def test_score_refuses_bad_input_naming_it(args: tuple, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        tiny_llm().score(*args)
