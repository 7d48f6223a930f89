"""Chunked prefill, a tiny token budget and forced preemption give the unconstrained greedy output."""

import pytest

from rollout import SamplingParams
from tests.builders import random_prompts, tiny_llm

GREEDY = SamplingParams(n=2, temperature=0, max_tokens=20, ignore_eos=True)
SEEDED = SamplingParams(n=3, temperature=1.0, max_tokens=20, ignore_eos=True, seed=11, logprobs=0)


def run(params: SamplingParams, **config: object) -> tuple[list[list[list[int]]], dict]:
    llm = tiny_llm("llama", seed=2, **config)
    outs = llm.generate(random_prompts(6, 1, 90, seed=9), params)
    return [[c.token_ids for c in out.outputs] for out in outs], llm.stats()


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
    assert got == expected
    assert stats["num_blocks_free"] == stats["num_blocks_total"]
    if "num_blocks" in constraint:
        assert stats["num_preemptions"] > 0
