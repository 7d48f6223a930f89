"""What tensor parallelism cannot run is refused before any worker starts, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout import LLM, EngineConfig
from tests.builders import tiny_model
from tests.distributed.tp_builders import saved_model, tp_llm


def test_the_size_must_be_a_positive_integer() -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        EngineConfig(tensor_parallel_size=0)


def test_the_size_must_divide_the_heads(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size 3 must divide the attention heads"):
        tp_llm(saved_model(tmp_path / "llama", "llama"), size=3)


def test_a_model_without_a_transformers_plan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no tensor-parallel plan"):
        tp_llm(saved_model(tmp_path / "gpt2", "gpt2"))


def test_an_in_memory_model_is_refused() -> None:
    """Each rank loads its own shard from the path; a model object already in memory cannot be split."""
    with pytest.raises(ValueError, match="pass a model path"):
        LLM(model=tiny_model(), config=EngineConfig(tensor_parallel_size=2, num_blocks=16))


def test_a_hybrid_model_is_refused(tmp_path: Path) -> None:
    """Recurrent states live per sequence on the rank that schedules; the step message does not carry them."""
    from tests.models.zoo import HYBRID, build

    qwen3_next = next(f for f in HYBRID if f.model_type == "qwen3_next")
    build(qwen3_next).save_pretrained(tmp_path / "qwen3_next")
    with pytest.raises(ValueError, match="tensor_parallel_size > 1 does not support hybrid models"):
        tp_llm(tmp_path / "qwen3_next")


def test_checked_updates_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="self_check_updates"):
        tp_llm(saved_model(tmp_path / "llama", "llama"), self_check_updates=True)
