"""Prefix caching on hybrid models: a hit resumes from a snapshot of the recurrent states, and every
output (greedy, seeded n samples, preempted, multi-turn) equals a run without caching."""

from __future__ import annotations

import pytest

from rollout import LLM, SamplingParams
from rollout.outputs import RequestOutput
from tests.builders import random_prompts
from tests.engine.test_hybrid_models import FAMILIES, SEEDED, TOL, hybrid_llm
from tests.models.zoo import HYBRID, Family, build

BLOCK = 4  # hybrid_llm's block size
GREEDY = SamplingParams(max_tokens=6, temperature=0.0, logprobs=0, logprobs_mode="raw", ignore_eos=True)
NEW_TEXT = [7, 8, 9, 10, 11]


def without_caching(family: Family, seed: int = 0, **config: object) -> LLM:
    return hybrid_llm(family, seed, enable_prefix_caching=False, **config)


def hits(llm: LLM) -> int:
    return llm.engine.stats()["num_prefix_hit_tokens"]


def assert_same(got: list[RequestOutput], want: list[RequestOutput]) -> None:
    """Same tokens, and logprobs equal up to the exactness tolerance (the chunks differ, not the model)."""
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g.outputs, w.outputs, strict=True):
            assert a.token_ids == b.token_ids
            assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) <= TOL


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model_type)
def test_a_repeated_prompt_resumes_at_its_last_full_block_and_equals_a_run_without_caching(
    family: Family,
) -> None:
    cached, plain = hybrid_llm(family), without_caching(family)
    prompts = random_prompts(2, 17, 30, seed=11)
    assert_same(cached.generate(prompts, GREEDY), plain.generate(prompts, GREEDY))
    assert hits(cached) == 0
    assert_same(cached.generate(prompts, GREEDY), plain.generate(prompts, GREEDY))
    assert hits(cached) == sum((len(p) - 1) // BLOCK * BLOCK for p in prompts)


@pytest.mark.parametrize("family", HYBRID, ids=lambda f: f.model_type)
def test_each_turn_resumes_where_the_previous_turn_ended(family: Family) -> None:
    """Turn k+1's prompt is turn k's prompt + completion + new text: it hits up to the last block
    boundary turn k computed (its last sampled token is never computed)."""
    cached, plain = hybrid_llm(family), without_caching(family)
    prompt = random_prompts(1, 13, 13, seed=12)[0]
    expected = 0
    for _ in range(3):
        before = hits(cached)
        got = cached.generate([prompt], GREEDY)
        assert_same(got, plain.generate([prompt], GREEDY))
        assert hits(cached) - before == expected
        completion = list(got[0].outputs[0].token_ids)
        expected = (len(prompt) + len(completion) - 1) // BLOCK * BLOCK
        prompt = prompt + completion + NEW_TEXT


@pytest.mark.parametrize("family", FAMILIES[:2], ids=lambda f: f.model_type)
def test_forked_samples_of_a_cached_prompt_equal_a_run_without_caching(family: Family) -> None:
    cached, plain = hybrid_llm(family), without_caching(family)
    prompts = random_prompts(2, 15, 30, seed=13)
    cached.generate(prompts, SEEDED)
    got = cached.generate(prompts, SEEDED)
    assert hits(cached) > 0
    assert_same(got, plain.generate(prompts, SEEDED))


@pytest.mark.parametrize("family", FAMILIES[:2], ids=lambda f: f.model_type)
def test_preempted_sequences_with_caching_equal_a_roomy_run_without_it(family: Family) -> None:
    prompts = random_prompts(4, 15, 30, seed=3)
    tight = hybrid_llm(family, num_blocks=24)
    tight.generate(prompts, SEEDED)
    got = tight.generate(prompts, SEEDED)
    stats = tight.engine.stats()
    assert stats["num_preemptions"] > 0 and stats["num_prefix_hit_tokens"] > 0
    assert_same(got, without_caching(family).generate(prompts, SEEDED))


@pytest.mark.parametrize("family", FAMILIES[:2], ids=lambda f: f.model_type)
def test_no_snapshot_is_used_across_a_weight_update(family: Family) -> None:
    llm = hybrid_llm(family)
    prompts = random_prompts(2, 15, 30, seed=6)
    llm.generate(prompts, GREEDY)
    assert llm.engine.stats()["num_state_snapshots"] > 0
    new = build(family, seed=1)
    llm.engine.update_weights(new.state_dict())
    assert llm.engine.stats()["num_state_snapshots"] == 0
    got = llm.generate(prompts, GREEDY)
    assert hits(llm) == 0
    assert_same(got, without_caching(family, seed=1).generate(prompts, GREEDY))


def test_reset_prefix_cache_drops_the_snapshots() -> None:
    llm = hybrid_llm(FAMILIES[0])
    prompts = random_prompts(1, 20, 20, seed=14)
    llm.generate(prompts, GREEDY)
    llm.reset_prefix_cache()
    assert llm.engine.stats()["num_state_snapshots"] == 0
    llm.generate(prompts, GREEDY)
    assert hits(llm) == 0


def test_prefix_caching_is_on_for_hybrids_and_every_slot_comes_back() -> None:
    llm = hybrid_llm(FAMILIES[1])
    prompts = random_prompts(3, 15, 30, seed=15)
    llm.generate(prompts, SEEDED)
    llm.generate(prompts, SEEDED)
    stats = llm.engine.stats()
    assert stats["prefix_caching"] == 1 and stats["num_prefix_hit_tokens"] > 0
    assert len(llm.engine.runner.states) == 0 and llm.engine.block_manager.snapshots.num_pending == 0
