"""Across server restarts one weight version names one weight set: a training run's pushed versions
strictly increase, and an adapter push never lands on a restarted server's own base.

Each test restarts an in-process server on the same port (a new boot id, as a restarted process)
at a step's push: right before it (the plugin's look at the server versions meets the new process)
or as it is sent (the push is the first call to reach the fresh server). That is where version
numbers repeated ([1, 1, 2, 3]; async [1, 2, 1, 2, 3]) and where an adapter-only push was accepted
as the fresh server's version 1, merged into that server's own base.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from peft import LoraConfig  # noqa: E402
from test_trl_restarts import on_step  # noqa: E402
from trl_builders import (  # noqa: E402
    free_port,
    grpo_args,
    in_process_server,
    length_reward,
    logged,
    make_dataset,
    make_model,
    make_tokenizer,
    save_model_dir,
)

from rollout.server.app import RolloutServer  # noqa: E402
from trainer_plugins.trl import RolloutBatch, RolloutConfig, RolloutGRPOTrainer  # noqa: E402

pytestmark = pytest.mark.slow  # real GRPO runs against servers restarted mid-run

LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)


class Restarts:
    """In-process servers on one port; `restart(model_dir)` replaces the running one (a new boot id)."""

    def __init__(self, model_dir: Path) -> None:
        self.port = free_port()
        self.servers: list[RolloutServer] = [in_process_server(model_dir, self.port)]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def restart(self, model_dir: Path) -> None:
        self.servers[-1].stop(grace=0.0)
        self.servers.append(in_process_server(model_dir, self.port))

    def stop(self) -> None:
        self.servers[-1].stop(grace=0.0)


def make_trainer(tmp_path: Path, address: str, peft: bool = False, **config: object) -> RolloutGRPOTrainer:
    tokenizer = make_tokenizer()
    return RolloutGRPOTrainer(
        make_model(tokenizer, seed=0),
        length_reward,
        grpo_args(tmp_path, max_steps=3),
        train_dataset=make_dataset(16),
        processing_class=tokenizer,
        rollout_config=RolloutConfig(server=address, wait_timeout=120.0, **config),
        peft_config=LORA if peft else None,
    )


def on_push(trainer: RolloutGRPOTrainer, step: int, action) -> None:
    """Runs `action()` as the first push at `step` is sent (after the plugin's last look at the servers)."""
    client = trainer.vllm_generation.client
    update, done = client.update_weights, []

    def wrapped(*args, **kwargs):
        if trainer.state.global_step == step and not done:
            done.append(True)
            action()
        return update(*args, **kwargs)

    client.update_weights = wrapped


def restart_at(trainer: RolloutGRPOTrainer, when: str, step: int, action) -> None:
    if when == "before the push":
        on_step(trainer, "sync_weights", step, action)
    else:
        on_push(trainer, step, action)


def strictly_increasing(values: list[int]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))


class RoundRecorder:
    """The trainer's weights at each push, by the version the push got, and every round trained on."""

    def __init__(self, trainer: RolloutGRPOTrainer) -> None:
        self.weights: dict[int, dict[str, torch.Tensor]] = {}
        self.batches: list[RolloutBatch] = []
        backend = trainer.vllm_generation
        push, fresh, rounds = backend._push, backend._generate_fresh, backend.async_rounds

        def recorded_push() -> None:
            pushes = len(backend.pushed_versions)
            push()
            if len(backend.pushed_versions) > pushes:  # not skipped for a restart seen first
                state = trainer.model.state_dict()
                self.weights[backend.pushed_version] = {k: v.detach().clone() for k, v in state.items()}

        def recorded(produce):
            def call(*args, **kwargs):
                batch = produce(*args, **kwargs)
                if batch is not None:
                    self.batches.append(batch)
                return batch

            return call

        backend._push, backend._generate_fresh = recorded_push, recorded(fresh)
        if rounds is not None:
            rounds.take = recorded(rounds.take)

    def worst_logprob_error(self, n: int) -> float:
        """Max |server logprob - teacher-forced logprob under the weights its version names|."""
        model = make_model(make_tokenizer(), seed=0).eval()
        worst = 0.0
        for batch in self.batches:
            for i, (completion, logprobs) in enumerate(
                zip(batch.completion_ids, batch.logprobs, strict=True)
            ):
                prompt = batch.prompt_ids[i // n]
                model.load_state_dict(self.weights[batch.versions[i]])
                with torch.no_grad():
                    logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
                want = logits.float().log_softmax(-1).gather(1, torch.tensor(completion)[:, None])[:, 0]
                worst = max(worst, (want - torch.tensor(logprobs)).abs().max().item())
        return worst


@pytest.mark.parametrize("when", ["before the push", "as the push is sent"])
@pytest.mark.parametrize("async_generation", [False, True], ids=["sync", "async"])
def test_pushed_versions_strictly_increase_across_a_restart(
    tmp_path: Path, async_generation: bool, when: str
) -> None:
    """Every round's logprobs equal a teacher-forced forward under the weights its version names:
    with a version pushed twice (before: [1, 1, 2, 3]) the rounds of its first weights fail that.
    "as the push is sent": the push lands on the fresh server before the plugin can see the restart."""
    model_dir = save_model_dir(tmp_path / "served", seed=1)
    servers = Restarts(model_dir)
    try:
        trainer = make_trainer(tmp_path, servers.address, async_generation=async_generation)
        recorder = RoundRecorder(trainer)
        restart_at(trainer, when, 1, lambda: servers.restart(model_dir))
        trainer.train()
        served = servers.servers[-1].loop.engine.weight_version
    finally:
        servers.stop()
    backend = trainer.vllm_generation
    worst = recorder.worst_logprob_error(trainer.num_generations)
    print(f"pushed versions {backend.pushed_versions}, recoveries {backend.recoveries}, worst {worst:.2e}")
    assert len(servers.servers) == 2 and backend.recoveries == 1 and trainer.state.global_step == 3
    assert strictly_increasing(backend.pushed_versions), backend.pushed_versions
    assert served == backend.pushed_versions[-1]
    assert len(recorder.batches) >= 3 and worst <= 1e-4


def test_an_adapter_push_reaching_a_server_restarted_on_another_base_is_refused_and_the_base_pushed_again(
    tmp_path: Path, caplog
) -> None:
    """Before, the restarted server took the adapter as its version 1, merged into the weights it
    loaded (another base), and served that until the plugin noticed the restart."""
    other = save_model_dir(tmp_path / "other", seed=2)  # what the restarted server loads
    servers = Restarts(save_model_dir(tmp_path / "served", seed=1))
    commits: list[str] = []  # the restarted server's updates: "adapter" (onto its base) or "base"

    def restart() -> None:
        servers.restart(other)
        engine = servers.servers[-1].loop.engine
        update = engine.update_weights

        def recorded(tensors, *args, lora=None, **kwargs) -> int:
            version = update(tensors, *args, lora=lora, **kwargs)
            onto_held = bool(lora) and any(f"{module}.weight" not in tensors for module in lora)
            commits.append("adapter" if onto_held else "base")
            return version

        engine.update_weights = recorded

    try:
        trainer = make_trainer(tmp_path, servers.address, peft=True)
        on_push(trainer, 1, restart)  # the adapter push is the first call to reach the new server
        with caplog.at_level(logging.WARNING, logger="trainer_plugins.trl"):
            trainer.train()
    finally:
        servers.stop()
    backend = trainer.vllm_generation
    print(f"restarted server's commits {commits}, pushed versions {backend.pushed_versions}")
    assert "holds another base" in caplog.text and backend.recoveries == 1
    assert commits == ["base", "adapter"]  # no adapter on its own base; adapters on the one pushed
    assert strictly_increasing(backend.pushed_versions)
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
