"""The manifest check refuses bad updates before any write, naming each offending tensor."""

import re

import pytest
import torch

from rollout.weights.manifest import Manifest, WeightUpdateError, normalize_name
from rollout.weights.updater import apply_named_tensors
from tests.builders import tiny_model


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def assert_bitwise_equal(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def good_update(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: torch.randn_like(t) for name, t in model.state_dict().items()}


BAD_UPDATES = {
    "wrong shape": ("model.layers.0.mlp.up_proj.weight", torch.zeros(3, 3), "shape [3, 3]"),
    "wrong dtype": ("model.norm.weight", torch.zeros(64, dtype=torch.bfloat16), "dtype bfloat16"),
    "unknown name": ("model.layers.9.mlp.up_proj.weight", torch.zeros(128, 64), "no such parameter"),
    "unmerged lora": (
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
        torch.zeros(8, 64),
        "merge_and_unload",
    ),
}


@pytest.mark.parametrize("case", BAD_UPDATES)
def test_bad_tensor_is_refused_by_name_before_any_write(case: str) -> None:
    model = tiny_model()
    before = snapshot(model)
    name, tensor, message = BAD_UPDATES[case]
    update = {**good_update(model), name: tensor}  # the good tensors come first and must not land
    with pytest.raises(WeightUpdateError, match=re.escape(message)) as info:
        apply_named_tensors(model, update)
    assert name.split(".lora_A")[0] in str(info.value)
    assert_bitwise_equal(model, before)


def test_every_problem_is_listed_in_one_error() -> None:
    model = tiny_model()
    update = {name: tensor for name, tensor, _ in BAD_UPDATES.values() if "lora" not in name}
    with pytest.raises(WeightUpdateError) as info:
        apply_named_tensors(model, update)
    assert all(name in str(info.value) for name in update)


def test_peft_merged_names_are_normalized() -> None:
    assert normalize_name("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") == (
        "model.layers.0.self_attn.q_proj.weight"
    )
    assert normalize_name("module._orig_mod.lm_head.weight") == "lm_head.weight"


def test_update_with_peft_names_lands_on_the_model_parameters() -> None:
    model = tiny_model()
    new = torch.randn(128, 64)
    apply_named_tensors(model, {"base_model.model.model.layers.1.mlp.up_proj.base_layer.weight": new})
    assert torch.equal(model.model.layers[1].mlp.up_proj.weight, new)


def test_partial_update_changes_only_the_named_tensors() -> None:
    model = tiny_model()
    before = snapshot(model)
    apply_named_tensors(model, {"model.norm.weight": torch.full((64,), 2.0)})
    assert torch.equal(model.model.norm.weight, torch.full((64,), 2.0))
    assert_bitwise_equal(model, {**before, "model.norm.weight": torch.full((64,), 2.0)})


def test_full_update_can_be_required() -> None:
    model = tiny_model()
    with pytest.raises(WeightUpdateError, match="missing .*lm_head.weight"):
        apply_named_tensors(model, {"model.norm.weight": torch.ones(64)}, allow_partial=False)


def test_same_tensor_sent_twice_is_refused() -> None:
    model = tiny_model()
    update = [("model.norm.weight", torch.ones(64)), ("module.model.norm.weight", torch.ones(64))]
    with pytest.raises(WeightUpdateError, match="sent twice"):
        apply_named_tensors(model, update)


def test_manifest_counts_bytes_per_dtype() -> None:
    manifest = Manifest.of({"a": torch.zeros(2, 3), "b": torch.zeros(4, dtype=torch.bfloat16)})
    assert [s.nbytes for s in manifest.tensors] == [24, 8]
    assert manifest.nbytes == 32


def test_peft_model_state_dict_is_refused_until_merged() -> None:
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    trainer = peft.get_peft_model(tiny_model(seed=1), config)
    server = tiny_model(seed=0)
    with pytest.raises(WeightUpdateError, match="merge_and_unload"):
        apply_named_tensors(server, trainer.state_dict())
    merged = trainer.merge_and_unload()
    apply_named_tensors(server, merged.state_dict())
    assert all(torch.equal(server.state_dict()[name], t) for name, t in merged.state_dict().items())


def test_peft_wrapped_names_of_a_merged_adapter_are_accepted() -> None:
    peft = pytest.importorskip("peft")
    trainer = peft.get_peft_model(tiny_model(seed=1), peft.LoraConfig(r=4, target_modules=["q_proj"]))
    trainer.merge_adapter()
    base_weights = {name: t for name, t in trainer.state_dict().items() if "lora_" not in name}
    server = tiny_model(seed=0)
    apply_named_tensors(server, base_weights)
    expected = trainer.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight
    assert torch.equal(server.model.layers[0].self_attn.q_proj.weight, expected)
