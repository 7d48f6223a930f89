"""The parity probe on an image-text model runs a prompt with a real image (made in code): a vision tower the
server (or the colocated engine) serves but the trainer never synced changes no text-only logprob, and is
caught here, by name, before any step trains on the wrong policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

from test_trl_vlm import image_dataset  # noqa: E402
from test_trl_vlm_colocate import colocated_vlm, message_length_reward  # noqa: E402
from trl_builders import grpo_args, in_process_server  # noqa: E402

from tests.multimodal.vlm_builders import llava_processor, tiny_llava  # noqa: E402
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer, colocate_generation, parity_probe  # noqa: E402
from trainer_plugins.trl.generation import RolloutGeneration  # noqa: E402

VISION = "model.vision_tower."


def without_vision_tower(iterate):
    """`_iter_named_params` that never yields the vision tower: a push that leaves it as the server has it."""

    def named(self):
        return ((name, t) for name, t in iterate(self) if not name.startswith(VISION))

    return named


def test_the_probe_catches_a_vision_tower_the_server_was_never_pushed(tmp_path: Path, monkeypatch) -> None:
    model_dir = tmp_path / "served"
    served = tiny_llava(seed=0)
    with torch.no_grad():  # the server's vision tower only differs from the trainer's
        for name, param in served.named_parameters():
            if name.startswith(VISION):
                param.copy_(tiny_llava(seed=1).get_parameter(name))
    served.save_pretrained(model_dir)
    llava_processor().save_pretrained(model_dir)
    monkeypatch.setattr(
        RolloutGeneration, "_iter_named_params", without_vision_tower(RolloutGeneration._iter_named_params)
    )
    server = in_process_server(model_dir)
    try:
        trainer = RolloutGRPOTrainer(
            tiny_llava(seed=0),
            message_length_reward,
            grpo_args(tmp_path, max_steps=2),
            train_dataset=image_dataset(),
            processing_class=llava_processor(),
            rollout_config=RolloutConfig(server=server.address, wait_timeout=120),
        )
        with pytest.raises(parity_probe.ParityMismatch, match="on the prompt with an image"):
            trainer.vllm_generation.sync_weights()  # train()'s first sync: the push, then the probe
    finally:
        server.stop(grace=0.0)


def test_the_colocated_engines_probe_has_an_image_and_catches_its_vision_tower(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(colocate_generation, "shares_weights", lambda *_: "its own copy, for this test")
    trainer = colocated_vlm(tmp_path)
    backend = trainer.vllm_generation
    assert not backend.shared
    backend.sync_weights()  # the first sync is probed (with the image): the copy is the trainer's
    assert backend.probes == 1
    samples = backend._probe_samples()
    assert any(s.model_inputs is not None and "pixel_values" in s.model_inputs for s in samples)
    with torch.no_grad():
        backend.llm.engine.model.get_parameter(VISION + "encoder.layers.0.mlp.fc1.weight").mul_(1.5)
    backend.llm.engine.commit_weight_version()
    samples = backend._probe_samples()
    precision = parity_probe.Precision.of(trainer.model, trainer.accelerator, backend.server_dtype)
    with pytest.raises(parity_probe.ParityMismatch, match="on the prompt with an image"):
        parity_probe.compare(trainer.model, samples, 1e-3, "in this test", precision)
