"""EngineWeights on its own (no LLMEngine, no requests): an update is validated whole before a byte is written,
written in place, and committed as the next version, which salts the block manager's prefix cache; adapters
merge into the held base and name it; a refusal changes nothing."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from rollout.config import EngineConfig
from rollout.engine.block_manager import BlockManager
from rollout.engine.engine_weights import EngineWeights
from rollout.engine.model.model_loader import prepare_model
from rollout.engine.model_runner import build_runner
from rollout.weights.lora_export import peft_update
from rollout.weights.manifest import WeightUpdateError
from rollout.weights.weight_base import BaseMismatchError
from tests.builders import tiny_model

MAX_LEN = 64
WEIGHT = "model.layers.0.self_attn.q_proj.weight"


def make_weights(seed: int = 0, **config: object) -> EngineWeights:
    config = EngineConfig(**{"num_blocks": 16, "self_check": False, **config})
    runner, _ = build_runner(prepare_model(tiny_model(seed=seed), config), config, MAX_LEN)
    return EngineWeights(config, runner, runner, BlockManager(runner.num_blocks, config.block_size), MAX_LEN)


def params(weights: EngineWeights) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in weights.local_runner.model.named_parameters()}


def test_an_update_writes_in_place_and_commits_the_next_version_into_the_prefix_cache_salt() -> None:
    weights = make_weights()
    storage = weights.local_runner.model.get_parameter(WEIGHT).data_ptr()
    new = tiny_model(seed=1).state_dict()
    assert weights.update(new) == 1
    assert weights.version == weights.block_manager.weight_version == 1
    assert weights.adapters.base_version == 1  # a full update is the new base
    assert all(torch.equal(p, new[name]) for name, p in params(weights).items())
    assert weights.local_runner.model.get_parameter(WEIGHT).data_ptr() == storage
    assert weights.update(tiny_model(seed=2).state_dict(), version=7) == 7


@pytest.mark.parametrize(
    ("tensors", "version", "error"),
    [
        ({WEIGHT: torch.zeros(64, 64)}, 0, ValueError),  # the version must increase
        ({WEIGHT: torch.zeros(64, 64), "model.no.such.weight": torch.zeros(2)}, None, WeightUpdateError),
        ({WEIGHT: torch.zeros(64, 64), "model.norm.weight": torch.zeros(3)}, None, WeightUpdateError),
    ],
    ids=["version", "unknown-name", "bad-shape"],
)
def test_a_refused_update_writes_nothing_and_keeps_the_version(tensors, version, error) -> None:
    weights = make_weights()
    before = params(weights)
    with pytest.raises(error):
        weights.update(tensors, version=version)
    assert weights.version == weights.block_manager.weight_version == 0
    assert all(torch.equal(p, before[name]) for name, p in params(weights).items())


def test_resolve_merges_an_adapter_without_writing_it() -> None:
    weights = make_weights()
    before = params(weights)
    policy = get_peft_model(tiny_model(seed=0), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)
    named, lora = peft_update(policy)
    resolved = weights.resolve(named, lora)
    assert not torch.equal(resolved[WEIGHT], before[WEIGHT])  # base + scaling * B @ A
    assert all(torch.equal(p, before[name]) for name, p in params(weights).items())
    assert weights.version == 0 and weights.adapters.adapted == []
    with pytest.raises(BaseMismatchError):  # an adapter merges into the base it names, and 3 is not held
        weights.update(named, lora=lora, base_version=3)
    assert weights.update(named, lora=lora, base_version=0) == 1
    assert WEIGHT in weights.adapters.adapted
    assert weights.adapters.base_version == 0  # merged into the held base: still the base


def test_a_commit_after_a_direct_write_is_a_new_base_unless_told_otherwise() -> None:
    weights = make_weights()
    assert weights.commit() == 1 and weights.adapters.base_version == 1
    assert weights.commit(replaces_base=False) == 2 and weights.adapters.base_version == 1
    with pytest.raises(ValueError, match="version must increase: current 2, got 2"):
        weights.commit(2)
    assert weights.version == weights.block_manager.weight_version == 2
