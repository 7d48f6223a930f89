"""Builders for end-to-end tests of hybrid and recurrent models: the zoo's tiny Nemotron-H (Mamba2, MoE,
attention and MLP layers) and Mamba-2 (no attention, no context length), as engines, servers and saved
model directories a `rollout serve` loads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from rollout import EngineConfig
from rollout.engine.llm_engine import LLMEngine
from rollout.server.app import RolloutServer
from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync
from tests.models import zoo
from tests.server.server_builders import serving

HYBRIDS = ("nemotron_h", "mamba2")
MAX_MODEL_LEN = 256  # Mamba-2 declares no context length: every engine here is given one
CONFIG = dict(max_model_len=MAX_MODEL_LEN, num_blocks=128, max_num_seqs=16)


def hybrid_model(model_type: str, seed: int = 0) -> PreTrainedModel:
    """The zoo's tiny model of `model_type` (random fp32 weights of `seed`, tuned so states matter)."""
    return zoo.build(next(f for f in zoo.HYBRID if f.model_type == model_type), seed)


def hybrid_engine(
    model_type: str, seed: int = 0, tokenizer: PreTrainedTokenizerBase | None = None, **config: object
) -> LLMEngine:
    return LLMEngine(hybrid_model(model_type, seed), tokenizer, EngineConfig(**{**CONFIG, **config}))


@contextmanager
def hybrid_weight_server(model_type: str, seed: int = 0, **config: object) -> Iterator[RolloutServer]:
    """A started server over a hybrid engine, with the WeightSyncService."""
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])
    with serving(hybrid_engine(model_type, seed, **config), **hooks) as server:
        yield server


def save_hybrid(path: Path, model_type: str, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> Path:
    """A model directory `rollout serve --model` loads: the zoo model and `tokenizer`."""
    hybrid_model(model_type, seed).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
