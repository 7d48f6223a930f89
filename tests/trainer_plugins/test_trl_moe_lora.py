"""RolloutGRPOTrainer with an "all-linear" LoRA policy on a MoE with stacked experts (Qwen3-MoE): PEFT adapts
the experts' 3-D parameters too, and after the full push each step sends only the adapter, experts included.
The server starts from other weights than the trainer's base, so the server matches the trainer only if
every expert adapter merged into the pushed base as PEFT merges it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from peft import LoraConfig  # noqa: E402
from test_trl_grpo import STARTUP_TIMEOUT, PushRecorder  # noqa: E402
from test_trl_lora import record_pushes  # noqa: E402
from trl_builders import grpo_args, length_reward, make_dataset, make_tokenizer  # noqa: E402

from tests.builders import tiny_model  # noqa: E402
from tests.serve_process import announced_address, start_serve, stop_server  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402

pytestmark = pytest.mark.slow  # a `rollout serve` process and a training run

ALL_LINEAR = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)


def test_an_all_linear_moe_policy_pushes_its_expert_adapters_and_the_server_matches(tmp_path: Path) -> None:
    served = tmp_path / "served"
    tiny_model("qwen3_moe", seed=1).save_pretrained(served)
    make_tokenizer().save_pretrained(served)
    log = tmp_path / "serve.log"
    process = start_serve(["--model", str(served), "--port", "0"], log)
    try:
        address = announced_address(process, log)
        trainer = RolloutGRPOTrainer(
            tiny_model("qwen3_moe", seed=0).train(),
            length_reward,
            grpo_args(tmp_path, max_steps=3),
            train_dataset=make_dataset(),
            processing_class=make_tokenizer(),
            rollout_config=RolloutConfig(server=address, wait_timeout=STARTUP_TIMEOUT),
            peft_config=ALL_LINEAR,
        )
        assert any(hasattr(m, "parameter_name") for m in trainer.model.modules())  # experts adapted
        pushes = record_pushes(trainer)
        recorder = PushRecorder(trainer, address)
        trainer.train()
    finally:
        stop_server(process)
    assert pushes == ["full", "adapter", "adapter"]
    assert recorder.versions == [1, 2, 3]
    assert recorder.greedy_mismatches == []
    assert max(recorder.logprob_diffs) < 1e-4
