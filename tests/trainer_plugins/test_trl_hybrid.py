"""GRPO on a hybrid policy: RolloutGRPOTrainer trains a tiny Nemotron-H (Mamba2, MoE, attention and MLP
layers) against a real `rollout serve` of it. The server starts from other weights than the trainer, so the
parity probe and TRL's importance-sampling ratios of 1 hold only if every push lands and the server's
recurrent states follow the trainer's own forward."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from trl_builders import grpo_args, length_reward, logged, make_dataset, make_tokenizer  # noqa: E402

from tests.serve_process import announced_address, start_serve, stop_server  # noqa: E402
from tests.server.hybrid_builders import hybrid_model, save_hybrid  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402

pytestmark = pytest.mark.slow  # a `rollout serve` process and a training run


def test_grpo_on_nemotron_h_pushes_every_step_and_the_server_samples_as_the_trainer_scores(
    tmp_path: Path,
) -> None:
    model = save_hybrid(tmp_path / "served", "nemotron_h", make_tokenizer(), seed=1)
    log = tmp_path / "serve.log"
    process = start_serve(["--model", str(model), "--port", "0"], log)
    try:
        trainer = RolloutGRPOTrainer(
            hybrid_model("nemotron_h", seed=0).train(),
            length_reward,
            grpo_args(tmp_path, max_steps=2),
            train_dataset=make_dataset(),
            processing_class=make_tokenizer(),
            rollout_config=RolloutConfig(server=announced_address(process, log), wait_timeout=120),
        )
        trainer.train()  # the parity probe after the first push raises ParityMismatch if it fails
    finally:
        stop_server(process)
    backend = trainer.vllm_generation
    assert backend.probes == 1 and backend.pushed_versions == [1, 2]
    assert max(logged(trainer, "sampling/sampling_logp_difference/max")) < 1e-4
    for bound in ("min", "max"):
        assert logged(trainer, f"sampling/importance_sampling_ratio/{bound}") == pytest.approx(
            [1.0, 1.0], abs=1e-3
        )
