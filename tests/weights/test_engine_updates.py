"""LLM.update_weights: outputs become the new model's, the version advances, no old prefix is reused."""

import pytest
import torch

from rollout import SamplingParams
from rollout.weights.manifest import WeightUpdateError
from tests.builders import random_prompts, tiny_llm, tiny_model

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def greedy_tokens(llm, prompts: list[list[int]]) -> list[list[int]]:
    return [out.outputs[0].token_ids for out in llm.generate(prompts, GREEDY)]


def test_outputs_after_update_equal_a_fresh_engine_with_the_new_weights() -> None:
    llm = tiny_llm(seed=0)
    prompts = random_prompts(4, 5, 40, seed=1)
    old = greedy_tokens(llm, prompts)
    new_model = tiny_model(seed=1)
    assert llm.update_weights(new_model.state_dict()) == 1
    outs = llm.generate(prompts, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == greedy_tokens(tiny_llm(seed=1), prompts)
    assert [o.outputs[0].token_ids for o in outs] != old
    assert all(o.outputs[0].weight_version == 1 for o in outs)


def test_no_prefix_block_from_before_the_update_is_reused() -> None:
    llm = tiny_llm(seed=0, block_size=16)
    prompt = random_prompts(1, 48, 48, seed=2)
    greedy_tokens(llm, prompt)
    greedy_tokens(llm, prompt)
    hits_without_update = llm.stats()["num_prefix_hit_tokens"]
    assert hits_without_update > 0  # the cache works, so the check below is meaningful
    llm.update_weights(tiny_model(seed=1).state_dict())
    after = greedy_tokens(llm, prompt)
    assert llm.stats()["num_prefix_hit_tokens"] == hits_without_update
    assert after == greedy_tokens(tiny_llm(seed=1), prompt)


def test_explicit_version_is_set_and_must_increase() -> None:
    llm = tiny_llm(seed=0)
    assert llm.update_weights({"model.norm.weight": torch.ones(64)}, version=7) == 7
    before = llm.engine.model.model.norm.weight.clone()
    with pytest.raises(WeightUpdateError, match="version"):
        llm.update_weights({"model.norm.weight": torch.zeros(64)}, version=7)
    assert torch.equal(llm.engine.model.model.norm.weight, before)
    assert llm.weight_version == 7


def test_refused_update_keeps_serving_the_old_weights_and_version() -> None:
    llm = tiny_llm(seed=0)
    prompts = random_prompts(2, 5, 20, seed=3)
    before = greedy_tokens(llm, prompts)
    update = {**tiny_model(seed=1).state_dict(), "model.norm.weight": torch.ones(65)}
    with pytest.raises(WeightUpdateError, match="model.norm.weight"):
        llm.update_weights(update)
    assert greedy_tokens(llm, prompts) == before
    assert llm.weight_version == 0
