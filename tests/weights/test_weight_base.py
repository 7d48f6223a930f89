"""In process, an adapter push names its base too: an engine holding another refuses it and changes nothing.

`LLM.update_weights` names the base its own last update left (or the weights it loaded); the base
moves with every update that does not merge into it, and with a direct write into the model.
"""

from __future__ import annotations

import pickle

import pytest
import torch

from rollout.weights.lora_export import peft_update
from rollout.weights.manifest import WeightUpdateError
from rollout.weights.weight_base import BaseMismatchError, WeightBase, check_base, relies_on_held_base
from tests.builders import tiny_llm, tiny_model
from tests.weights.lora_builders import (
    assert_same_outputs,
    merged_reference,
    outputs,
    peft_policy,
    set_adapter,
)

Q_PROJ = "model.layers.0.self_attn.q_proj"


def state(llm) -> tuple[int, int, list[str], dict[str, torch.Tensor]]:
    engine = llm.engine
    weights = {name: t.clone() for name, t in engine.model.state_dict().items()}
    return engine.weight_version, engine.adapters.base_version, engine.adapters.adapted, weights


def assert_unchanged(llm, before: tuple) -> None:
    version, base_version, adapted, weights = state(llm)
    assert (version, base_version, adapted) == before[:3]
    assert all(torch.equal(weights[name], t) for name, t in before[3].items())


def test_an_update_relies_on_the_held_base_when_it_carries_a_targets_factors_without_its_weight() -> None:
    adapter, targets = peft_update(peft_policy(), "adapter")
    full, _ = peft_update(peft_policy(), "full")
    assert relies_on_held_base((name for name, _ in adapter), targets)
    assert not relies_on_held_base((name for name, _ in full), targets)
    assert not relies_on_held_base([f"{Q_PROJ}.weight"], None)  # no adapters: it replaces the base


def test_check_base_refuses_another_base_or_none_only_for_an_update_that_relies_on_it() -> None:
    held = WeightBase("b", 3)
    check_base(WeightBase("b", 3), held, relies=True)
    check_base(WeightBase("a", 1), held, relies=False)  # a full update replaces the base: not checked
    with pytest.raises(
        BaseMismatchError, match=r"base version 1 of server process a.*base version 3 of server process b"
    ):
        check_base(WeightBase("a", 1), held, relies=True)
    with pytest.raises(WeightUpdateError, match="base: "):
        check_base(None, held, relies=True)


def test_every_update_that_does_not_merge_into_the_held_base_replaces_it() -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    llm = tiny_llm(seed=0)
    assert llm.base_version == 0  # the weights loaded
    assert llm.update_weights(policy, lora="full") == 1 and llm.base_version == 1
    assert llm.update_weights(set_adapter(policy, 3)) == 2 and llm.base_version == 1
    assert llm.update_weights(tiny_model(seed=2).state_dict()) == 3 and llm.base_version == 3


def test_an_adapter_push_naming_another_base_is_refused_and_changes_nothing() -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    llm = tiny_llm(seed=0)
    llm.update_weights(policy, lora="full")
    before = state(llm)
    with pytest.raises(BaseMismatchError, match=r"applies to base version 0; held here: base version 1"):
        llm.update_weights(set_adapter(policy, 3), base_version=0)
    assert_unchanged(llm, before)
    llm.update_weights(set_adapter(policy, 4), base_version=1)  # the base held: accepted
    assert_same_outputs(outputs(llm), merged_reference(policy))


def test_after_another_writer_replaced_the_base_the_llms_next_adapter_push_is_refused() -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    llm = tiny_llm(seed=0)
    llm.update_weights(policy, lora="full")  # this LLM's base: version 1
    llm.engine.update_weights(tiny_model(seed=2).state_dict())  # another writer, around the LLM
    before = state(llm)
    with pytest.raises(BaseMismatchError, match="held here: base version 2"):
        llm.update_weights(set_adapter(policy, 3))
    assert_unchanged(llm, before)


def test_a_direct_write_into_the_model_is_a_new_base() -> None:
    policy = peft_policy(base_seed=0, adapter_seed=2)
    llm = tiny_llm(seed=0)
    llm.update_weights(policy)  # onto the weights loaded
    with torch.no_grad():
        llm.engine.model.get_parameter("model.norm.weight").mul_(2.0)
    outputs(llm)  # the direct-write watch commits a new version before generating: a new base
    assert llm.base_version == llm.engine.weight_version == 2
    with pytest.raises(BaseMismatchError, match="held here: base version 2"):
        llm.update_weights(set_adapter(policy, 3))


def test_an_engine_update_relying_on_the_held_base_without_naming_it_is_refused_naming_base() -> None:
    llm = tiny_llm(seed=0)
    named, targets = peft_update(peft_policy(adapter_seed=1))
    before = state(llm)
    with pytest.raises(
        WeightUpdateError, match="base: an update whose LoRA factors merge into the held base"
    ):
        llm.engine.update_weights(named, lora=targets)
    assert_unchanged(llm, before)


def test_a_base_mismatch_survives_pickling_as_itself() -> None:
    """A fleet replica's refusal reaches the caller through Ray, which pickles it."""
    error = BaseMismatchError(WeightBase("boot-a", 3), WeightBase("boot-b", 5))
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is BaseMismatchError
    assert (back.named, back.held, str(back)) == (error.named, error.held, str(error))
