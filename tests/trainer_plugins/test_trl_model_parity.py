"""The trainer refuses to train on a server that computes another function, and feeds a server in another dtype.

Each server below agrees with the trainer on architecture, parameter names and shapes, so every
weight push succeeds: only the forward-config comparison and the parity probe stand between the
run and a whole training on another policy.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from trl_builders import (  # noqa: E402
    grpo_args,
    in_process_server,
    length_reward,
    logged,
    make_dataset,
    make_model,
    make_tokenizer,
    save_model_dir,
    serving_model,
)

from trainer_plugins.trl import (  # noqa: E402
    ParityMismatch,
    RolloutConfig,
    RolloutGRPOTrainer,
    RolloutModelMismatch,
    server_checks,
)

pytestmark = pytest.mark.slow  # each test starts a `rollout serve` process


def sharpened(model: torch.nn.Module) -> torch.nn.Module:
    """Random init gives near-uniform logits and attention, where most settings barely show; scale them up."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "lm_head.weight")):
                param.mul_(8.0)
    return model


def make_trainer(tmp_path: Path, address: str, max_steps: int = 2, **model_overrides) -> RolloutGRPOTrainer:
    tokenizer = make_tokenizer()
    return RolloutGRPOTrainer(
        sharpened(make_model(tokenizer, seed=0, **model_overrides)),
        length_reward,
        grpo_args(tmp_path, max_steps),
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        rollout_config=RolloutConfig(server=address, wait_timeout=120),
    )


def test_forward_settings_that_differ_are_each_named_at_startup(tmp_path: Path) -> None:
    different = dict(rope_theta=5.0, hidden_act="gelu", tie_word_embeddings=False)
    with serving_model(tmp_path, **different) as address, pytest.raises(RolloutModelMismatch) as refused:
        make_trainer(tmp_path, address, tie_word_embeddings=True)
    message = str(refused.value)
    assert "rope_parameters: server {'rope_theta': 5.0" in message
    assert "hidden_act: server 'gelu', trainer 'silu'" in message
    assert "tie_word_embeddings: server False, trainer True" in message


def test_parity_probe_refuses_an_untied_server_lm_head_the_comparison_missed(tmp_path, monkeypatch) -> None:
    # The trainer's lm_head is tied, so it is never pushed: the server keeps its own random one.
    monkeypatch.setattr(server_checks, "forward_differences", lambda *args: [])  # a setting nobody compares
    with serving_model(tmp_path, tie_word_embeddings=False) as address:
        trainer = make_trainer(tmp_path, address, tie_word_embeddings=True)
        with pytest.raises(ParityMismatch, match=r"after the first weight push.* by \d\.\d+ nats per token"):
            trainer.train()
    assert trainer.state.global_step == 0


def test_fp32_trainer_feeds_a_bf16_server_cast_on_push(tmp_path: Path, caplog) -> None:
    with serving_model(tmp_path, "--dtype", "bfloat16") as address:
        trainer = make_trainer(tmp_path, address)
        assert trainer.model.dtype == torch.float32
        with caplog.at_level(logging.INFO, logger="trainer_plugins.trl"):
            trainer.train()
    assert "casting pushed weights from float32 to the server's bfloat16" in caplog.text
    assert "parity probe after the first weight push" in caplog.text
    diffs = logged(trainer, "sampling/sampling_logp_difference/mean")
    assert len(diffs) == 2 and max(diffs) < 6e-2  # bf16 noise, not another policy


def test_bf16_autocast_trainer_is_probed_at_bf16_noise_against_an_fp32_server(tmp_path: Path, caplog) -> None:
    """GRPOConfig(bf16=True), TRL's default: fp32 parameters, forward under bf16 autocast; the server
    computes in fp32. The probe's limit is the bf16 noise the trainer really computes with."""
    server = in_process_server(save_model_dir(tmp_path / "served", seed=1))
    tokenizer = make_tokenizer()
    try:
        trainer = RolloutGRPOTrainer(
            sharpened(make_model(tokenizer, seed=0)),
            length_reward,
            grpo_args(tmp_path, max_steps=1, bf16=True),
            train_dataset=make_dataset(),
            processing_class=tokenizer,
            rollout_config=RolloutConfig(server=server.address, wait_timeout=120),
        )
        with caplog.at_level(logging.INFO, logger="trainer_plugins.trl"):
            trainer.train()
    finally:
        server.stop(grace=0.0)
    probe = next(line for line in caplog.text.splitlines() if "parity probe" in line)
    print(probe)
    assert "trainer computes in bfloat16 (mixed-precision autocast), server in float32" in probe
    assert trainer.state.global_step == 1
