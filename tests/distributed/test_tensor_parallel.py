"""Tensor parallelism on the CPU (two processes, gloo): the same tokens and logprobs as one process,
on dense and MoE models, through n samples, prefix hits, preemption and weight updates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rollout import SamplingParams
from tests.builders import random_prompts
from tests.distributed.tp_builders import FAMILIES, one_llm, perturbed_state, saved_model, tp_llm

TOL = 1e-4
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, logprobs=0)
SEEDED = SamplingParams(n=3, max_tokens=10, temperature=1.0, seed=7, logprobs=0)


def assert_same_outputs(tp_outputs, one_outputs) -> None:
    for tp, one in zip(tp_outputs, one_outputs, strict=True):
        for a, b in zip(tp.outputs, one.outputs, strict=True):
            assert a.token_ids == b.token_ids
            assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) <= TOL


@pytest.mark.parametrize("family", FAMILIES)
def test_two_ranks_generate_what_one_does(tmp_path: Path, family: str) -> None:
    path = saved_model(tmp_path / family, family)
    prompts = random_prompts(4, 5, 30, seed=3)
    tp = tp_llm(path)
    try:
        one = one_llm(path)
        assert_same_outputs(tp.generate(prompts, GREEDY), one.generate(prompts, GREEDY))
        assert_same_outputs(tp.generate(prompts, SEEDED), one.generate(prompts, SEEDED))
    finally:
        tp.engine.shutdown()


def test_prefix_hits_preemption_and_an_update_behave_as_on_one_rank(tmp_path: Path) -> None:
    """A pool too small for the batch preempts (recompute); a repeated prompt hits the prefix cache;
    after an update the two ranks generate what a fresh single-rank engine with the new weights does."""
    path = saved_model(tmp_path / "llama", "llama")
    prompts = random_prompts(6, 20, 40, seed=4)
    params = SamplingParams(n=2, max_tokens=24, temperature=1.0, seed=1, logprobs=0, ignore_eos=True)
    tp = tp_llm(path, num_blocks=12, block_size=8, max_model_len=96)
    try:
        one = one_llm(path, num_blocks=12, block_size=8, max_model_len=96)
        assert_same_outputs(tp.generate(prompts, params), one.generate(prompts, params))
        assert tp.engine.stats()["num_preemptions"] > 0
        assert_same_outputs(tp.generate(prompts[:1], GREEDY), one.generate(prompts[:1], GREEDY))
        assert tp.engine.stats()["num_prefix_hit_tokens"] == one.engine.stats()["num_prefix_hit_tokens"] > 0

        new = perturbed_state(path)
        assert tp.engine.update_weights(new) == 1
        fresh = one_llm(
            saved_updated(path, new, tmp_path / "updated"), num_blocks=12, block_size=8, max_model_len=96
        )
        assert_same_outputs(tp.generate(prompts, params), fresh.generate(prompts, params))
    finally:
        tp.engine.shutdown()


def test_a_refused_update_changes_nothing_on_any_rank(tmp_path: Path) -> None:
    path = saved_model(tmp_path / "llama", "llama")
    prompts = random_prompts(3, 5, 20, seed=5)
    tp = tp_llm(path)
    try:
        before = tp.generate(prompts, GREEDY)
        bad = perturbed_state(path)
        bad["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
        with pytest.raises(ValueError, match="up_proj"):
            tp.engine.update_weights(bad)
        assert tp.engine.weight_version == 0
        assert_same_outputs(tp.generate(prompts, GREEDY), before)
    finally:
        tp.engine.shutdown()


def saved_updated(path: Path, state: dict[str, torch.Tensor], directory: Path) -> Path:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path)
    model.load_state_dict(state)
    model.save_pretrained(directory)
    return directory


def test_a_rank_that_fails_to_stage_leaves_every_rank_on_the_old_weights(tmp_path: Path) -> None:
    """Rank 0 validated the update and staged its shards; rank 1 fails on one tensor: the vote stops
    both ranks from writing anything, and rank 0's error names rank 1 and its cause."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from tests.distributed.rank_fault import update_with_a_failing_rank

    path = saved_model(tmp_path / "llama", "llama")
    store = dist.TCPStore("127.0.0.1", 0, world_size=2, is_master=True, wait_for_workers=False)
    mp.spawn(update_with_a_failing_rank, args=(str(path), store.port, perturbed_state(path)), nprocs=2)
