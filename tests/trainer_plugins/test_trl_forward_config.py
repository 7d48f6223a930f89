"""The forward-config comparison: silent on the same checkpoint reloaded, names every setting that differs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trl")

from transformers import AutoConfig  # noqa: E402

from tests.builders import tiny_model  # noqa: E402
from trainer_plugins.trl.forward_config import forward_differences  # noqa: E402


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral", "gpt2"])
def test_the_same_checkpoint_saved_and_reloaded_has_no_difference(tmp_path: Path, arch: str) -> None:
    model = tiny_model(arch)
    model.config.use_cache = False  # what a trainer with gradient checkpointing sets: not a forward setting
    model.save_pretrained(tmp_path)
    served = AutoConfig.from_pretrained(tmp_path)
    served.dtype = "bfloat16"  # `rollout serve --dtype` differs from the trainer's: handled by the push
    assert forward_differences(served.to_json_string(use_diff=False), model.config) == []


def test_each_differing_forward_setting_is_named() -> None:
    trainer = tiny_model("qwen2").config
    server = tiny_model("qwen2", rms_norm_eps=1e-3, hidden_act="gelu").config
    server.attention_dropout = 0.1  # train-time only
    found = forward_differences(server.to_json_string(use_diff=False), trainer)
    assert found == ["hidden_act: server 'gelu', trainer 'silu'", "rms_norm_eps: server 0.001, trainer 1e-06"]
