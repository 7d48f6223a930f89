"""The self-check's routing pin: every MoE router is found, and in the check every router call is pinned."""

from __future__ import annotations

import pytest
import torch

from rollout import LLM, EngineConfig
from rollout.engine.model import model_guard
from rollout.engine.model.check_forwards import eager_logits, engine_logits
from rollout.engine.model.check_plan import check_plan
from rollout.engine.model.pinned_routing import RoutingPin, routers
from rollout.ops.backends import get_backend
from tests.models.zoo import SUPPORTED, Family, build

CONFIG = dict(num_blocks=32, block_size=4, max_num_batched_tokens=5, max_model_len=64, self_check=False)
MOE_LAYERS = {"mixtral": 2, "qwen2_moe": 2, "gpt_oss": 2, "llama4_text": 2, "jetmoe": 4, "jamba": 2}


def _family(model_type: str) -> Family:
    return next(f for f in SUPPORTED if f.model_type == model_type)


@pytest.mark.parametrize("model_type", [*MOE_LAYERS, "llama", "qwen3"])
def test_routers_are_the_moe_gates_and_nothing_else(model_type: str) -> None:
    """One router per MoE layer (jetmoe: its attention experts too); dense models have none."""
    assert len(routers(build(_family(model_type)))) == MOE_LAYERS.get(model_type, 0)


@pytest.mark.parametrize("model_type", ["mixtral", "jetmoe", "qwen3_next"])
def test_every_router_call_of_every_engine_step_is_pinned(model_type: str) -> None:
    """Chunked prefill, mixed batches, decode, hybrid splits: each router call gets the recorded rows."""
    model = LLM(model=build(_family(model_type)), config=EngineConfig(**CONFIG)).engine.model
    spec = model_guard.check_model(model)
    plan, pin = check_plan(vocab=100, block_size=4, max_model_len=64, seed=0), RoutingPin(model)
    eager_logits(model, plan.seqs, pin)
    engine_logits(model, spec, get_backend("auto", torch.device("cpu")), 4, plan, [pin.replaying])
    assert pin.pinned == len(plan.steps) * len(pin.routers) > 0
