"""Adapter-only updates (LLM.update_weights with a PEFT model): they serve what a push of the merged
weights serves, merge into the kept base each time, and refuse or roll back without a trace."""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import PreTrainedModel

from rollout.engine import engine_weights
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.weights.adapter_store import AdapterStore
from rollout.weights.lora import LoraTarget
from rollout.weights.lora_export import peft_update
from rollout.weights.manifest import WeightUpdateError
from tests.builders import tiny_llm, tiny_model
from tests.models import zoo
from tests.weights.lora_builders import (
    GREEDY_LOGPROBS,
    assert_same_outputs,
    merged_reference,
    merged_state,
    outputs,
    peft_policy,
    set_adapter,
)

Q_PROJ = "model.layers.0.self_attn.q_proj"
EXPERTS = "model.layers.0.mlp.experts"
# Tests comparing served weights with PEFT's CPU merge bit for bit serve on the CPU too (same kernels).


def expert_model(model_type: str) -> PreTrainedModel:
    if model_type == "qwen3_moe":
        return tiny_model("qwen3_moe")
    return zoo.build(next(f for f in zoo.SUPPORTED if f.model_type == model_type))


def weights(llm) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in llm.engine.model.state_dict().items()}


def test_an_adapter_push_serves_what_a_push_of_the_merged_weights_serves() -> None:
    policy = peft_policy(adapter_seed=1)
    llm = tiny_llm(seed=0)
    assert llm.update_weights(policy) == 1
    assert_same_outputs(outputs(llm), merged_reference(policy))


def test_an_adapter_push_sends_only_the_adapter() -> None:
    named, targets = peft_update(peft_policy(r=4))
    assert all(".lora_A." in name or ".lora_B." in name for name, _ in named)
    assert len(named) == 2 * len(targets) == 2 * 7 * 2  # 7 linear modules per layer, 2 layers


def test_each_adapter_push_merges_into_the_base_not_into_the_previous_merge() -> None:
    policy = peft_policy(adapter_seed=1)
    llm = tiny_llm(seed=0)
    for seed in (2, 3):
        llm.update_weights(set_adapter(policy, seed))
    assert llm.weight_version == 2
    assert_same_outputs(outputs(llm), merged_reference(policy))


def test_a_full_peft_push_sets_the_base_and_the_adapter() -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    llm = tiny_llm(seed=0)  # another base: only the full push brings the policy's
    llm.update_weights(policy, lora="full")
    assert_same_outputs(outputs(llm), merged_reference(policy))
    llm.update_weights(set_adapter(policy, 3))  # the next adapter merges into the pushed base
    assert_same_outputs(outputs(llm), merged_reference(policy))


def test_a_base_weight_push_after_adapter_pushes_serves_the_pushed_weights_then_adapts_them() -> None:
    llm = tiny_llm(seed=0)
    llm.update_weights(peft_policy(base_seed=0, adapter_seed=1))
    llm.update_weights(tiny_model(seed=2).state_dict())  # plain weights: the adapters end
    assert llm.engine.adapters.adapted == []
    assert_same_outputs(outputs(llm), outputs(tiny_llm(seed=2)), tolerance=0.0)
    policy = peft_policy(base_seed=2, adapter_seed=3)
    llm.update_weights(policy)
    assert_same_outputs(outputs(llm), merged_reference(policy, server_seed=2))


def test_a_bad_adapter_shape_is_refused_naming_the_module_and_nothing_changes() -> None:
    llm = tiny_llm(seed=0)
    llm.update_weights(peft_policy(adapter_seed=1))
    before, adapted = weights(llm), llm.engine.adapters.adapted
    named, targets = peft_update(set_adapter(peft_policy(), 2))
    named = [(n, t[:, :-1] if n == f"{Q_PROJ}.lora_A.weight" else t) for n, t in named]
    with pytest.raises(WeightUpdateError, match=Q_PROJ) as info:
        llm.update_weights(named, lora=targets)
    assert "model.layers.1" not in str(info.value)  # only the bad module is named
    assert llm.weight_version == 1 and llm.engine.adapters.adapted == adapted
    assert all(torch.equal(t, before[n]) for n, t in weights(llm).items())


def test_lora_factors_without_their_targets_are_refused() -> None:
    llm = tiny_llm(seed=0)
    named, _ = peft_update(peft_policy())
    with pytest.raises(WeightUpdateError, match="scaling"):
        llm.update_weights(named)
    with pytest.raises(WeightUpdateError, match="layers.1.mlp.up_proj: LoRA factors sent without"):
        llm.update_weights(named, lora={Q_PROJ: LoraTarget(2.0)})
    assert llm.weight_version == 0


def test_a_nan_adapter_is_refused_before_any_write() -> None:
    llm = tiny_llm(seed=0)
    before = weights(llm)
    named, targets = peft_update(peft_policy())
    named = [(n, t.clone().fill_(float("nan")) if n == f"{Q_PROJ}.lora_B.weight" else t) for n, t in named]
    with pytest.raises(WeightUpdateError, match=Q_PROJ):
        llm.update_weights(named, lora=targets)
    assert all(torch.equal(t, before[n]) for n, t in weights(llm).items())
    assert llm.engine.adapters.adapted == []


def test_an_adapter_update_rolled_back_by_the_self_check_leaves_weights_and_adapters_as_they_were(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    policy = peft_policy(adapter_seed=1)
    llm = tiny_llm(seed=0, self_check_updates=True)
    llm.update_weights(policy)
    before = weights(llm)

    def failing_check(*args: object) -> float:
        raise UnsupportedModelError("injected mismatch")

    monkeypatch.setattr(engine_weights, "check_runner", failing_check)
    with pytest.raises(WeightUpdateError, match="rolled back"):
        llm.update_weights(set_adapter(policy, 2))
    assert all(torch.equal(t, before[n]) for n, t in weights(llm).items())
    monkeypatch.undo()
    llm.update_weights(set_adapter(policy, 3))  # still merges into the original base
    assert_same_outputs(outputs(llm), merged_reference(policy))


def test_an_adapter_update_under_keep_continues_running_samples_with_their_version_spans() -> None:
    llm = tiny_llm(seed=0)
    engine = llm.engine
    engine.add_request("r", [5, 6, 7, 8], GREEDY_LOGPROBS)
    engine.step()
    engine.step()
    named, targets = peft_update(peft_policy(adapter_seed=1))
    assert engine.update_weights(named, in_flight="keep", lora=targets, base_version=0) == 1
    assert engine.last_in_flight.num_tokens_kept > 0
    finished = []
    while engine.has_unfinished_requests():
        finished += engine.step()
    assert finished[0].outputs[0].weight_versions == [(0, 0), (2, 1)]


def test_an_expert_adapter_push_names_each_stacked_parameter_once() -> None:
    """PEFT's "all-linear" on a MoE with stacked experts (Qwen3-MoE, Mixtral, Qwen3-Next) adapts the
    experts' 3-D parameters (its ParamWrapper, two nested on one module): factors go by the parameter."""
    named, targets = peft_update(peft_policy(arch="qwen3_moe"))
    names = [name for name, _ in named]
    assert len(names) == len(set(names)) == 2 * len(targets)
    assert targets[f"{EXPERTS}.gate_up_proj"] == LoraTarget(2.0, parameter=True)
    assert f"{EXPERTS}.down_proj.lora_A.weight" in names
    assert targets["model.layers.0.mlp.gate.weight"].parameter  # the router's 2-D weight


def test_an_expert_adapter_push_serves_bit_for_bit_the_peft_merged_weights() -> None:
    policy = peft_policy(arch="qwen3_moe", adapter_seed=1)
    llm = tiny_llm("qwen3_moe", seed=0, device="cpu")
    assert llm.update_weights(policy) == 1
    assert f"{EXPERTS}.gate_up_proj" in llm.engine.adapters.adapted
    merged = merged_state(policy)
    assert all(torch.equal(t, merged[n]) for n, t in weights(llm).items())
    assert_same_outputs(outputs(llm), merged_reference(policy, arch="qwen3_moe", device="cpu"))


def test_each_expert_adapter_push_merges_into_the_base_not_into_the_previous_merge() -> None:
    policy = peft_policy(arch="qwen3_moe", adapter_seed=1)
    llm = tiny_llm("qwen3_moe", seed=0, device="cpu")
    for seed in (2, 3):
        llm.update_weights(set_adapter(policy, seed))
    merged = merged_state(policy)
    assert all(torch.equal(t, merged[n]) for n, t in weights(llm).items())
    assert_same_outputs(outputs(llm), merged_reference(policy, arch="qwen3_moe", device="cpu"))


def test_a_full_push_of_a_moe_policy_sets_the_experts_base_and_their_adapter() -> None:
    policy = peft_policy(arch="qwen3_moe", base_seed=1, adapter_seed=2)
    llm = tiny_llm("qwen3_moe", seed=0, device="cpu")  # another base: only the full push brings the policy's
    llm.update_weights(policy, lora="full")
    llm.update_weights(set_adapter(policy, 3))
    merged = merged_state(policy)
    assert all(torch.equal(t, merged[n]) for n, t in weights(llm).items())


def test_a_base_push_after_expert_adapter_pushes_serves_the_pushed_weights_then_adapts_them() -> None:
    llm = tiny_llm("qwen3_moe", seed=0)
    llm.update_weights(peft_policy(arch="qwen3_moe", adapter_seed=1))
    llm.update_weights(tiny_model("qwen3_moe", seed=2).state_dict())
    assert llm.engine.adapters.adapted == []
    assert_same_outputs(outputs(llm), outputs(tiny_llm("qwen3_moe", seed=2)), tolerance=0.0)
    policy = peft_policy(arch="qwen3_moe", base_seed=2, adapter_seed=3)
    llm.update_weights(policy)
    assert_same_outputs(outputs(llm), merged_reference(policy, server_seed=2, arch="qwen3_moe"))


@pytest.mark.parametrize(
    ("model_type", "dtype", "lora"),
    [
        ("qwen3_moe", torch.bfloat16, {}),  # PEFT keeps the factors in fp32 over bf16 experts
        ("gpt_oss", torch.float32, {"target_parameters": ["gate_up_proj", "down_proj"]}),  # [e, in, out]
    ],
)
def test_an_expert_adapter_merges_as_peft_merges_in_every_dtype_and_layout(
    model_type: str, dtype: torch.dtype, lora: dict
) -> None:
    model = expert_model(model_type).to(dtype)
    served = copy.deepcopy(model)
    config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", **lora)
    policy = set_adapter(get_peft_model(model, config), 1)
    named, targets = peft_update(policy)
    assert any(t.parameter and t.fan_in_fan_out == (model_type == "gpt_oss") for t in targets.values())
    plan = AdapterStore().plan(served, named, targets)
    merged = merged_state(policy)
    assert all(torch.equal(t, merged[name]) for name, t in plan.tensors)


def test_a_bad_expert_adapter_shape_is_refused_naming_the_parameter_and_nothing_changes() -> None:
    llm = tiny_llm("qwen3_moe", seed=0)
    llm.update_weights(peft_policy(arch="qwen3_moe", adapter_seed=1))
    before, adapted = weights(llm), llm.engine.adapters.adapted
    named, targets = peft_update(peft_policy(arch="qwen3_moe", adapter_seed=2))
    bad = f"{EXPERTS}.down_proj"
    named = [(n, t[:-1] if n == f"{bad}.lora_A.weight" else t) for n, t in named]  # 15 rows, 4 experts
    with pytest.raises(WeightUpdateError, match=rf"{bad}: lora_A \[15, 32\].*experts=4") as info:
        llm.update_weights(named, lora=targets)
    assert "gate_up_proj" not in str(info.value) and "layers.1" not in str(info.value)
    assert llm.weight_version == 1 and llm.engine.adapters.adapted == adapted
    assert all(torch.equal(t, before[n]) for n, t in weights(llm).items())


def test_an_expert_adapter_for_a_module_instead_of_its_parameter_is_refused() -> None:
    """A parameter target names the parameter: factors keyed by the experts module fit no weight."""
    llm = tiny_llm("qwen3_moe", seed=0)
    named, targets = peft_update(peft_policy(arch="qwen3_moe"))
    wrong = {k: LoraTarget(t.scaling) if k == f"{EXPERTS}.down_proj" else t for k, t in targets.items()}
    with pytest.raises(WeightUpdateError, match=rf"{EXPERTS}.down_proj: no such linear module"):
        llm.update_weights(named, lora=wrong)
    assert llm.weight_version == 0
