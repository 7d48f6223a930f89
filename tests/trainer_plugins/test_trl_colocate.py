"""TRL's colocate mode: RolloutGRPOTrainer with GRPOConfig(use_vllm=True, vllm_mode="colocate") and no server.

The engine runs in the training process. With the trainer's dtype and device it serves the trainer's own
parameter storage (no copy): importance-sampling ratios of 1 then hold only if every optimizer step is a new
weight version the engine sees, and the losses equal server mode's on the same seeds (an in-process server
with the same engine seed, pushed to every step). Otherwise (a bf16 engine, a PEFT policy) it holds a copy
written atomically at every sync; sleep mode gives its memory back between rounds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from peft import LoraConfig  # noqa: E402
from trl_builders import (  # noqa: E402
    grpo_args,
    in_process_server,
    length_reward,
    logged,
    make_dataset,
    make_model,
    make_tokenizer,
    save_model_dir,
)

from rollout import EngineConfig  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402

COLOCATE = dict(use_vllm=True, vllm_mode="colocate")
ENGINE = EngineConfig(num_blocks=256)


def colocated(
    tmp_path: Path, steps: int = 3, engine: EngineConfig = ENGINE, peft=None, **args
) -> RolloutGRPOTrainer:
    tokenizer = make_tokenizer()
    return RolloutGRPOTrainer(
        make_model(tokenizer, seed=0),
        length_reward,
        grpo_args(tmp_path, max_steps=steps, **{**COLOCATE, **args}),
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        peft_config=peft,
        rollout_config=RolloutConfig(engine=engine),
    )


def assert_is_ratio_one(trainer: RolloutGRPOTrainer, steps: int) -> None:
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
    for bound in ("min", "max"):
        ratios = logged(trainer, f"sampling/importance_sampling_ratio/{bound}")
        assert ratios == pytest.approx([1.0] * steps, abs=1e-3)


def test_the_colocated_engine_serves_the_trainers_own_storage_and_sees_every_step(tmp_path: Path) -> None:
    trainer = colocated(tmp_path)
    backend = trainer.vllm_generation
    assert backend.shared and trainer.rollout_client is None
    engine_param = backend.llm.engine.model.get_parameter("model.layers.0.mlp.up_proj.weight")
    trainer_param = trainer.model.get_parameter("model.layers.0.mlp.up_proj.weight")
    assert engine_param.untyped_storage().data_ptr() == trainer_param.untyped_storage().data_ptr()
    trainer.train()  # the parity probe after the first sync raises ParityMismatch if it fails
    assert backend.probes == 1 and backend.pushed_versions == [1, 2, 3]
    assert torch.equal(engine_param, trainer_param.detach())  # trained weights, served as they are
    assert_is_ratio_one(trainer, 3)


def test_colocate_trains_as_server_mode_on_the_same_seeds(tmp_path: Path) -> None:
    server = in_process_server(save_model_dir(tmp_path / "served", seed=0))
    try:
        tokenizer = make_tokenizer()
        served = RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            length_reward,
            grpo_args(tmp_path, max_steps=3),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_config=RolloutConfig(server=server.address, wait_timeout=120),
        )
        served.train()
    finally:
        server.stop(grace=0.0)
    trainer = colocated(tmp_path, engine=EngineConfig())  # the server's engine settings, its seed
    trainer.train()
    for same_tokens in ("reward", "completions/mean_length", "completions/min_length"):
        assert logged(trainer, same_tokens) == logged(served, same_tokens)
    # the same samples; logprobs may differ in the last bits (prefix hits split the forward differently)
    assert logged(trainer, "loss") == pytest.approx(logged(served, "loss"), rel=1e-6, abs=1e-7)


def test_sleep_mode_frees_the_kv_cache_between_rounds_and_changes_no_loss(tmp_path: Path) -> None:
    awake = colocated(tmp_path)
    awake.train()
    trainer = colocated(tmp_path, vllm_enable_sleep_mode=True)
    llm = trainer.vllm_generation.llm
    kv = llm.engine.local_runner.kv_caches[0][0]
    assert llm.is_sleeping() and kv.untyped_storage().nbytes() == 0  # asleep from the start, as TRL's
    trainer.train()
    assert llm.is_sleeping() and kv.untyped_storage().nbytes() == 0  # asleep through each optimizer step
    assert logged(trainer, "loss") == logged(awake, "loss")
    assert_is_ratio_one(trainer, 3)


def test_a_bf16_engine_holds_its_own_copy_written_every_step_and_sleeps_at_level_2(tmp_path: Path) -> None:
    trainer = colocated(
        tmp_path, engine=EngineConfig(num_blocks=256, dtype="bfloat16"), vllm_enable_sleep_mode=True
    )
    backend = trainer.vllm_generation
    assert not backend.shared and backend.sleep_level == 2
    trainer.train()
    assert backend.pushed_versions == [1, 2, 3] and backend.llm.memory.level == 2
    backend.llm.wake_up()
    backend.sync_weights()  # the discarded weights come back from the trainer's
    engine_param = backend.llm.engine.model.get_parameter("model.norm.weight")
    assert engine_param.dtype == torch.bfloat16
    assert torch.equal(engine_param, trainer.model.get_parameter("model.norm.weight").detach().bfloat16())


def test_a_peft_policy_is_served_as_base_plus_adapter_merged_with_exact_ratios(tmp_path: Path) -> None:
    peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = colocated(tmp_path, peft=peft, vllm_enable_sleep_mode=True)
    backend = trainer.vllm_generation
    assert not backend.shared and backend.sleep_level == 2  # no adapter merged yet
    trainer.train()
    assert backend.llm.engine.adapters.adapted and backend.sleep_level == 1
    assert_is_ratio_one(trainer, 3)


@pytest.mark.parametrize(
    ("settings", "rollout", "error", "match"),
    [
        ({"vllm_tensor_parallel_size": 2}, {}, NotImplementedError, "vllm_tensor_parallel_size=2"),
        ({}, {"async_generation": True}, ValueError, "async_generation with vllm_mode='colocate'"),
    ],
    ids=["tensor-parallel", "async"],
)
def test_what_colocate_cannot_do_is_refused_by_name(tmp_path: Path, settings, rollout, error, match) -> None:
    tokenizer = make_tokenizer()
    with pytest.raises(error, match=match):
        RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            length_reward,
            grpo_args(tmp_path, **{**COLOCATE, **settings}),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_config=RolloutConfig(**rollout),
        )
