"""A restarted rollout server is never trained on silently, and a restart is ridden out.

A server process has a boot id on every response; a restart between steps is invisible to weight
versions (the next push lands on the fresh server first and sets the version the trainer expects),
so only the boot id tells. Each test restarts a server on the same port during a real GRPO run:
the run either recovers (the round is generated again with the trainer's weights: TRL's own
sampled-vs-trained logprob difference stays at fp32 noise) or stops before training on the server.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

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
    start_server,
)

from tests.serve_process import stop_server  # noqa: E402
from trainer_plugins.trl import (  # noqa: E402
    ParityMismatch,
    RolloutConfig,
    RolloutGRPOTrainer,
    RolloutModelMismatch,
    RolloutServerUnavailable,
    server_checks,
)

pytestmark = pytest.mark.slow  # real servers restarted under a real trainer


def make_trainer(
    tmp_path: Path, server: str | list[str], wait_timeout: float = 600.0, max_steps: int = 3, **overrides
) -> RolloutGRPOTrainer:
    tokenizer = make_tokenizer()
    model = make_model(tokenizer, seed=0, **overrides)
    with torch.no_grad():  # random init gives near-uniform logits, where a wrong lm_head barely shows
        model.lm_head.weight.mul_(8.0)
    return RolloutGRPOTrainer(
        model,
        length_reward,
        grpo_args(tmp_path, max_steps),
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        rollout_config=RolloutConfig(server=server, wait_timeout=wait_timeout),
    )


def on_step(trainer: RolloutGRPOTrainer, method: str, step: int, action) -> None:
    """Runs `action()` the first time the backend's `method` is called at `step`, then the method."""
    backend = trainer.vllm_generation
    original = getattr(backend, method)
    done: list[bool] = []

    def wrapped(*args, **kwargs):
        if trainer.state.global_step == step and not done:
            done.append(True)
            action()
        return original(*args, **kwargs)

    setattr(backend, method, wrapped)


def test_the_only_server_restarted_by_sigterm_between_steps_and_sigkill_mid_round_is_ridden_out(
    tmp_path: Path, caplog
) -> None:
    """Real `rollout serve` processes. Step 1: SIGTERM before the push, the replacement still loading
    when the push is sent (it fails UNAVAILABLE). Step 2: SIGKILL as the round is requested."""
    model_dir = save_model_dir(tmp_path / "served", seed=1)
    port = free_port()
    servers = [start_server(model_dir, port, tmp_path / "s0.log")]

    def restart(kill: bool) -> None:
        servers[-1].kill() if kill else servers[-1].terminate()
        servers[-1].wait(120)
        servers.append(start_server(model_dir, port, tmp_path / f"s{len(servers)}.log"))

    try:
        trainer = make_trainer(tmp_path, f"127.0.0.1:{port}")
        on_step(trainer, "sync_weights", 1, lambda: restart(kill=False))
        on_step(trainer, "_request", 2, lambda: restart(kill=True))
        with caplog.at_level(logging.WARNING, logger="trainer_plugins.trl"):
            trainer.train()
    finally:
        for server in servers:
            stop_server(server)
    backend = trainer.vllm_generation
    diffs = logged(trainer, "sampling/sampling_logp_difference/max")
    print(f"recoveries {backend.recoveries}, probes {backend.probes}, TRL max |logp diff| per step {diffs}")
    assert trainer.state.global_step == 3 and len(servers) == 3
    assert backend.recoveries == 2 and backend.probes == 3  # each restart: checks, full push, probe again
    assert "a server stopped answering" in caplog.text
    assert max(diffs) < 1e-4  # no round came from a server without the trainer's weights


def test_a_server_back_with_another_rope_theta_is_refused_though_the_push_reached_it_first(tmp_path) -> None:
    """Restarted between steps: the step's push lands on the new server and sets the expected version."""
    port = free_port()
    servers = [in_process_server(save_model_dir(tmp_path / "same", seed=1), port)]
    other = save_model_dir(tmp_path / "other", seed=1, rope_theta=1e6)

    def restart() -> None:
        servers[-1].stop(grace=0.0)
        servers.append(in_process_server(other, port))

    try:
        trainer = make_trainer(tmp_path, f"127.0.0.1:{port}")
        on_step(trainer, "sync_weights", 1, restart)
        with pytest.raises(RolloutModelMismatch, match="rope_parameters: server {'rope_theta': 1000000.0"):
            trainer.train()
    finally:
        servers[-1].stop(grace=0.0)
    assert trainer.state.global_step == 1  # nothing trained on the restarted server


def test_a_server_back_mid_round_with_an_untied_lm_head_fails_the_probe_again(tmp_path, monkeypatch) -> None:
    """The trainer's lm_head is tied (never pushed); the restarted server keeps its own, and a
    comparison that misses it (patched out) leaves the parity probe, which must run again."""
    monkeypatch.setattr(server_checks, "forward_differences", lambda *args: [])
    port = free_port()
    servers = [in_process_server(save_model_dir(tmp_path / "tied", seed=1, tie_word_embeddings=True), port)]
    untied = save_model_dir(tmp_path / "untied", seed=1, tie_word_embeddings=False)

    def restart() -> None:
        servers[-1].stop(grace=0.0)
        servers.append(in_process_server(untied, port))

    try:
        trainer = make_trainer(tmp_path, f"127.0.0.1:{port}", tie_word_embeddings=True)
        on_step(trainer, "_request", 1, restart)
        with pytest.raises(
            ParityMismatch, match=r"after a server restart: .* by \d+\.\d+ nats per token"
        ) as err:
            trainer.train()
    finally:
        servers[-1].stop(grace=0.0)
    print(err.value)
    assert trainer.state.global_step == 1


def test_one_of_two_servers_gone_mid_round_and_back_later_is_ridden_out(tmp_path: Path) -> None:
    """Its prompts go to the other server (the round stays correct); it comes back 4 s later, is
    checked, gets the full weights and prompts again."""
    port_a, port_b = free_port(), free_port()
    model_dir = save_model_dir(tmp_path / "served", seed=1)
    servers = {port_a: in_process_server(model_dir, port_a), port_b: in_process_server(model_dir, port_b)}
    back = threading.Timer(4.0, lambda: servers.__setitem__(port_b, in_process_server(model_dir, port_b)))

    def stop_b() -> None:
        servers[port_b].stop(grace=0.0)
        back.start()

    try:
        trainer = make_trainer(tmp_path, [f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"])
        on_step(trainer, "_request", 1, stop_b)
        trainer.train()
        back.join()
        versions = {port: s.loop.engine.weight_version for port, s in servers.items()}
    finally:
        back.cancel()
        for server in servers.values():
            server.stop(grace=0.0)
    backend = trainer.vllm_generation
    diffs = logged(trainer, "sampling/sampling_logp_difference/max")
    print(f"recoveries {backend.recoveries}, versions {versions}, TRL max |logp diff| per step {diffs}")
    assert trainer.state.global_step == 3 and backend.recoveries >= 1
    assert set(versions.values()) == {backend.pushed_version}  # both serve the last push
    assert backend.client.dead_servers == {}  # the server that came back gets prompts again
    assert max(diffs) < 1e-4


def test_a_server_gone_for_good_ends_training_with_rollout_server_unavailable(tmp_path: Path) -> None:
    server = in_process_server(save_model_dir(tmp_path / "served", seed=1))
    trainer = make_trainer(tmp_path, server.address, wait_timeout=3.0)
    on_step(trainer, "sync_weights", 1, lambda: server.stop(grace=0.0))
    with pytest.raises(RolloutServerUnavailable, match=r"no rollout server ready .* after 3 s"):
        trainer.train()
    assert trainer.state.global_step == 1


def test_an_async_round_prefetched_before_a_restart_is_dropped_and_generated_again(tmp_path: Path) -> None:
    port = free_port()
    model_dir = save_model_dir(tmp_path / "served", seed=1)
    servers = [in_process_server(model_dir, port)]

    def restart() -> None:
        servers[-1].stop(grace=0.0)
        servers.append(in_process_server(model_dir, port))

    tokenizer = make_tokenizer()
    try:
        trainer = RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            length_reward,
            grpo_args(tmp_path, max_steps=3),
            train_dataset=make_dataset(16),
            processing_class=tokenizer,
            rollout_config=RolloutConfig(server=f"127.0.0.1:{port}", async_generation=True),
        )
        on_step(trainer, "sync_weights", 1, restart)
        trainer.train()
    finally:
        servers[-1].stop(grace=0.0)
    kinds = [(e.kind, e.global_step) for e in trainer.async_rounds.events]
    assert ("dropped: restart", 1) in kinds and ("used", 2) in kinds, kinds
    assert trainer.state.global_step == 3 and trainer.vllm_generation.recoveries == 1
