"""GRPOTrainer's VLM path against a rollout server (in this process, real gRPC on loopback): a tiny LLaVA
with its processor as `processing_class`, a dataset whose prompts hold an image part and an `image` column.
The server's logprobs are the trainer's own forward's on the processor's inputs: the importance ratio is 1."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl_builders import grpo_args, in_process_server, length_reward, logged  # noqa: E402

from tests.multimodal.vlm_builders import llava_processor, random_image, tiny_llava  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer  # noqa: E402


def image_dataset(count: int = 8) -> Dataset:
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "how many"}]}]
    return Dataset.from_dict({"prompt": [prompt] * count, "image": [random_image(i) for i in range(count)]})


def test_grpo_on_a_vlm_is_exact(tmp_path: Path) -> None:
    model_dir = tmp_path / "served"
    tiny_llava(seed=1).save_pretrained(model_dir)  # other weights than the trainer's: pushes must land
    llava_processor().save_pretrained(model_dir)
    server = in_process_server(model_dir)
    try:
        trainer = RolloutGRPOTrainer(
            tiny_llava(seed=0),
            length_reward,
            grpo_args(tmp_path, max_steps=2),
            train_dataset=image_dataset(),
            processing_class=llava_processor(),
            rollout_config=RolloutConfig(server=server.address, wait_timeout=120),
        )
        trainer.train()
        encoder_runs = server.loop.engine.local_runner.images.num_encoder_runs
    finally:
        server.stop(grace=0.0)
    # the parity probe's image prompt once, then 2 steps x 1 prompt (a batch of 4 = 1 prompt x 4 generations)
    assert encoder_runs == 3
    ratios = logged(trainer, "sampling/importance_sampling_ratio/mean")
    assert len(ratios) == 2
    assert all(abs(r - 1.0) < 1e-3 for r in ratios), ratios
