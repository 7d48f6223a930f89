"""One training process of the two-process tests (test_trl_colocate_processes.py), run by `accelerate launch`.

Usage: colocate_worker.py OUT_JSON NUM_GENERATIONS (colocate | SERVER_ADDRESS). Trains the tiny policy for
two GRPO steps with seeded sampling (generation_kwargs seed: a sample's noise is a function of its prompt,
index and position, so colocated engines and a server draw the same samples); the main process writes the
logged metrics to OUT_JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trl_builders import grpo_args, make_dataset, make_model, make_tokenizer  # noqa: E402

from rollout import EngineConfig  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402

METRICS = (
    "loss",
    "reward",
    "completions/mean_length",
    "sampling/importance_sampling_ratio/min",
    "sampling/importance_sampling_ratio/max",
)


def digit_reward(completions: list[str], **_: object) -> list[float]:
    """A reward that varies within a group of random completions, so the loss is not 0."""
    return [float(sum(c.isdigit() for c in completion)) for completion in completions]


def main(out: str, num_generations: int, where: str) -> None:
    colocate = where == "colocate"
    mode = dict(use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=True) if colocate else {}
    rollout = RolloutConfig(engine=EngineConfig(num_blocks=256)) if colocate else RolloutConfig(server=where)
    tokenizer = make_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        args = grpo_args(
            Path(tmp), max_steps=2, num_generations=num_generations, generation_kwargs={"seed": 7}, **mode
        )
        trainer = RolloutGRPOTrainer(
            make_model(tokenizer, seed=0),
            digit_reward,
            args,
            train_dataset=make_dataset(16),
            processing_class=tokenizer,
            rollout_config=rollout,
        )
        trainer.train()
    if trainer.accelerator.is_main_process:
        history = [h for h in trainer.state.log_history if "loss" in h]
        metrics = {name: [h[name] for h in history] for name in METRICS}
        metrics["num_processes"] = trainer.accelerator.num_processes
        metrics["shared"] = getattr(trainer.vllm_generation, "shared", None)
        Path(out).write_text(json.dumps(metrics))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
