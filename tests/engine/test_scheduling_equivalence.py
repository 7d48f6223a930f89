"""Chunked prefill, a tiny token budget and forced preemption give the unconstrained output: the same
tokens, and for seeded sampling the same logprobs (atol 1e-5)."""

import pytest
import torch

from rollout import CompletionOutput, SamplingParams
from tests.builders import random_prompts, tiny_llm

GREEDY = SamplingParams(n=2, temperature=0, max_tokens=20, ignore_eos=True)
SEEDED = SamplingParams(n=3, temperature=1.0, max_tokens=20, ignore_eos=True, seed=11, logprobs=2)


def run(params: SamplingParams, **config: object) -> tuple[list[CompletionOutput], dict]:
    """Every sample, prompt by prompt; and the engine's stats."""
    llm = tiny_llm("llama", seed=2, **config)
    outs = llm.generate(random_prompts(6, 1, 90, seed=9), params)
    return [sample for out in outs for sample in out.outputs], llm.stats()


def logprob_table(samples: list[CompletionOutput]) -> torch.Tensor:
    """Each sampled token's logprob, then its top-k alternatives' by token id (k + 1 of them when the
    sampled token is not among the top k), flattened: rows differ in length."""
    return torch.tensor(
        [
            value
            for s in samples
            for logprob, top in zip(s.token_logprobs, s.top_logprobs, strict=True)
            for value in (logprob, *(top[t] for t in sorted(top)))
        ]
    )


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize(
    "constraint",
    [
        {"max_num_batched_tokens": 16},  # long prompts prefilled in chunks
        {"max_num_batched_tokens": 3, "max_num_seqs": 3},  # tiny budget and few seats
        {"num_blocks": 12, "max_model_len": 128},  # too few blocks: forces preemption
    ],
    ids=["chunked", "tiny-budget", "preemption"],
)
def test_constrained_scheduling_gives_the_unconstrained_output(
    params: SamplingParams, constraint: dict
) -> None:
    expected, _ = run(params)
    got, stats = run(params, **constraint)
    assert [s.token_ids for s in got] == [s.token_ids for s in expected]
    if params.logprobs is not None:
        assert [[sorted(top) for top in s.top_logprobs] for s in got] == [
            [sorted(top) for top in s.top_logprobs] for s in expected
        ]
        torch.testing.assert_close(logprob_table(got), logprob_table(expected), atol=1e-5, rtol=0)
    assert stats["num_blocks_free"] == stats["num_blocks_total"]
    if "num_blocks" in constraint:
        assert stats["num_preemptions"] > 0
