"""GRPOTrainer's VLM path in TRL's colocate mode: a tiny LLaVA with its processor as `processing_class`, the
dataset's `image` column, and the engine inside the training process serving the trainer's own parameters,
vision tower included. The engine's logprobs are the trainer's forward's on the processor's inputs: ratio 1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig

pytest.importorskip("trl")

from test_trl_vlm import image_dataset  # noqa: E402
from trl_builders import grpo_args, logged  # noqa: E402

from rollout import EngineConfig  # noqa: E402
from tests.multimodal.vlm_builders import llava_processor, tiny_llava  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer, colocate_generation  # noqa: E402


def message_length_reward(completions: list[list[dict]], **_: object) -> list[float]:
    """Shorter replies score higher: a reward with variance over conversational completions."""
    return [-float(len(c[0]["content"])) for c in completions]


VISION_WEIGHT = "model.vision_tower.encoder.layers.0.mlp.fc1.weight"


def colocated_vlm(tmp_path: Path, steps: int = 2, **args: object) -> RolloutGRPOTrainer:
    return RolloutGRPOTrainer(
        tiny_llava(seed=0),
        message_length_reward,
        grpo_args(tmp_path, max_steps=steps, use_vllm=True, vllm_mode="colocate", **args),
        train_dataset=image_dataset(),
        processing_class=llava_processor(),
        rollout_config=RolloutConfig(engine=EngineConfig(num_blocks=256)),
    )


def test_colocated_grpo_on_a_vlm_shares_the_vision_tower_and_is_exact(tmp_path: Path) -> None:
    trainer = colocated_vlm(tmp_path)
    backend = trainer.vllm_generation
    assert backend.shared
    engine_param = backend.llm.engine.model.get_parameter(VISION_WEIGHT)
    trainer_param = trainer.model.get_parameter(VISION_WEIGHT)
    assert engine_param.untyped_storage().data_ptr() == trainer_param.untyped_storage().data_ptr()
    before = trainer_param.detach().clone()
    trainer.train()  # the parity probe (with an image) after the first sync raises if it fails
    assert backend.probes == 1 and backend.pushed_versions == [1, 2]
    assert not torch.equal(before, trainer_param.detach())  # the vision tower trained, served as it is
    assert torch.equal(engine_param, trainer_param.detach())
    assert backend.llm.engine.local_runner.images.num_encoder_runs >= 2  # once per step's prompt, at least
    ratios = logged(trainer, "sampling/importance_sampling_ratio/mean")
    assert ratios == pytest.approx([1.0, 1.0], abs=1e-3)
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-3


def test_an_own_copy_is_written_vision_tower_included_at_every_sync_and_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(colocate_generation, "shares_weights", lambda *_: "its own copy, for this test")
    trainer = colocated_vlm(tmp_path, vllm_enable_sleep_mode=True)
    backend = trainer.vllm_generation
    assert not backend.shared and backend.sleep_level == 2  # the engine's weights discarded between rounds
    trainer.train()
    assert backend.pushed_versions == [1, 2]
    backend.llm.wake_up()
    backend.sync_weights()
    engine_param = backend.llm.engine.model.get_parameter(VISION_WEIGHT)
    assert engine_param.untyped_storage().data_ptr() != trainer.model.get_parameter(VISION_WEIGHT).data_ptr()
    assert torch.equal(engine_param, trainer.model.get_parameter(VISION_WEIGHT).detach())
    ratios = logged(trainer, "sampling/importance_sampling_ratio/mean")
    assert ratios == pytest.approx([1.0, 1.0], abs=1e-3)


def test_a_peft_vlm_is_served_merged_vision_tower_adapters_included(tmp_path: Path) -> None:
    peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])  # CLIP's and Llama's
    trainer = RolloutGRPOTrainer(
        tiny_llava(seed=0),
        message_length_reward,
        grpo_args(tmp_path, max_steps=2, use_vllm=True, vllm_mode="colocate"),
        train_dataset=image_dataset(),
        processing_class=llava_processor(),
        peft_config=peft,
        rollout_config=RolloutConfig(engine=EngineConfig(num_blocks=256)),
    )
    names = [name for name, _ in trainer.model.named_parameters()]
    assert any("vision_tower" in name and "lora_A" in name for name in names)  # the tower is adapted too
    trainer.train()
    assert trainer.vllm_generation.llm.engine.adapters.adapted
    ratios = logged(trainer, "sampling/importance_sampling_ratio/mean")
    assert ratios == pytest.approx([1.0, 1.0], abs=1e-3)
