"""RolloutGRPOTrainer with a PEFT LoRA policy: the base weights go once (and after a restart), then
each step pushes only the adapter; the server still serves the trainer's adapted model.

The server starts from other weights than the trainer's base, so parity holds only if the full push
brought the base and every adapter push landed on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from peft import LoraConfig  # noqa: E402
from test_trl_grpo import STARTUP_TIMEOUT, PushRecorder, running_server  # noqa: E402
from trl_builders import (  # noqa: E402
    free_port,
    grpo_args,
    length_reward,
    make_dataset,
    make_model,
    make_tokenizer,
    save_model_dir,
    start_server,
)

from rollout.weights.lora import adapter_factor  # noqa: E402
from tests.serve_process import stop_server  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402

LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)


def make_peft_trainer(tmp_path: Path, address: str, **config: object) -> RolloutGRPOTrainer:
    tokenizer = make_tokenizer()
    return RolloutGRPOTrainer(
        make_model(tokenizer, seed=0),
        length_reward,
        grpo_args(tmp_path, max_steps=3),
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        rollout_config=RolloutConfig(server=address, wait_timeout=STARTUP_TIMEOUT, **config),
        peft_config=LORA,
    )


def record_pushes(trainer: RolloutGRPOTrainer) -> list[str]:
    """Per push: "adapter" (LoRA factors only), "full" (base weights and factors) or "merged"."""
    backend = trainer.vllm_generation
    pushes: list[str] = []

    def wrap(client):
        push = client.update_weights

        def recorded(named, *args, lora=None, **kwargs):
            names = [name for name, _ in named]
            factors = sum(adapter_factor(name) is not None for name in names)
            kind = "merged" if lora is None else "adapter" if factors == len(names) else "full"
            pushes.append(kind)
            return push(named, *args, lora=lora, **kwargs)

        client.update_weights = recorded

    wrap(backend.client)
    return pushes


@pytest.mark.slow
def test_a_peft_policy_pushes_its_base_once_then_only_its_adapter_and_the_server_matches(tmp_path) -> None:
    with running_server(tmp_path, seed=1) as address:  # not the trainer's base: the full push brings it
        trainer = make_peft_trainer(tmp_path, address)
        pushes = record_pushes(trainer)
        recorder = PushRecorder(trainer, address)
        trainer.train()
    assert pushes == ["full", "adapter", "adapter"]
    assert recorder.versions == [1, 2, 3]
    assert recorder.greedy_mismatches == []
    assert max(recorder.logprob_diffs) < 1e-4


@pytest.mark.slow
def test_adapter_pushes_off_pushes_the_merged_weights_every_step(tmp_path: Path) -> None:
    with running_server(tmp_path, seed=0) as address:
        trainer = make_peft_trainer(tmp_path, address, adapter_pushes=False)
        pushes = record_pushes(trainer)
        recorder = PushRecorder(trainer, address)
        trainer.train()
    assert pushes == ["merged"] * 3
    assert recorder.greedy_mismatches == []
    assert max(recorder.logprob_diffs) < 1e-4


@pytest.mark.slow
def test_after_a_server_restart_the_base_is_pushed_again(tmp_path: Path) -> None:
    model_dir = save_model_dir(tmp_path / "server_model", seed=1)
    port = free_port()
    address = f"127.0.0.1:{port}"
    servers = [start_server(model_dir, port, tmp_path / "server_0.log")]
    try:
        trainer = make_peft_trainer(tmp_path, address)
        backend = trainer.vllm_generation
        pushes = record_pushes(trainer)
        recorder = PushRecorder(trainer, address)

        def push_then_restart() -> None:
            recorder()
            if len(servers) == 1 and trainer.state.global_step == 1:  # the server forgets push #2
                stop_server(servers[0])
                servers.append(start_server(model_dir, port, tmp_path / "server_1.log"))

        backend.sync_weights = push_then_restart
        trainer.train()
    finally:
        for server in servers:
            stop_server(server)
    assert len(servers) == 2
    assert pushes[:3] == ["full", "adapter", "full"]  # the re-push to the restarted server brings the base
    assert recorder.greedy_mismatches == []
    assert max(recorder.logprob_diffs) < 1e-4
