"""`EngineConfig.self_check_updates`: an update that breaks exactness is rolled back, bit for bit.

The failing case is built the way it happens: gpt-oss served by a backend that drops attention
sinks passes every check while the sinks are inert (-30: no weight in any softmax), and an update
that makes them matter must not commit.
"""

from __future__ import annotations

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.engine_weights import check_runner
from rollout.ops import paged_attention_ref
from rollout.ops.attention_backend import AttentionBackend
from rollout.weights.manifest import WeightUpdateError
from tests.builders import tiny_model
from tests.models.zoo import SUPPORTED, build

CONFIG = dict(
    num_blocks=32, block_size=4, max_num_batched_tokens=5, max_model_len=64, self_check_updates=True
)
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
PROMPT = [3, 5, 7, 9, 11, 13, 17]


def _drop_sinks(*args: object, sinks: torch.Tensor | None = None, **kwargs: object) -> torch.Tensor:
    return paged_attention_ref.paged_attention(*args, **kwargs)


def _gpt_oss_with_sinks(value: float, seed: int = 0) -> torch.nn.Module:
    model = build(next(f for f in SUPPORTED if f.model_type == "gpt_oss"), seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("sinks"):
                param.fill_(value)
    return model


def _tokens(llm: LLM) -> list[int]:
    return list(llm.generate([PROMPT], GREEDY)[0].outputs[0].token_ids)


def test_an_update_that_breaks_exactness_is_rolled_back_and_the_version_stays() -> None:
    llm = LLM(model=_gpt_oss_with_sinks(-30.0), config=EngineConfig(**CONFIG))
    runner = llm.engine.runner
    runner.backend = AttentionBackend(paged_attention_ref.write_kv_cache, _drop_sinks)
    assert check_runner(runner) <= 1e-4  # inert sinks: dropping them changes nothing yet
    before = {name: p.detach().clone() for name, p in runner.model.named_parameters()}
    tokens_before = _tokens(llm)
    new = _gpt_oss_with_sinks(2.0, seed=1).state_dict()
    with pytest.raises(WeightUpdateError, match=r"rolled back.*gpt_oss.*differ"):
        llm.update_weights(new)
    assert llm.weight_version == 0
    for name, param in runner.model.named_parameters():
        assert torch.equal(param, before[name]), name
    assert _tokens(llm) == tokens_before


def test_an_update_with_a_nan_is_rolled_back() -> None:
    llm = LLM(model=tiny_model("llama", 0), config=EngineConfig(**CONFIG))
    tokens_before = _tokens(llm)
    new = tiny_model("llama", 1).state_dict()
    new["model.layers.0.mlp.down_proj.weight"][0, 0] = float("nan")
    with pytest.raises(WeightUpdateError, match="rolled back"):
        llm.update_weights(new, version=7)
    assert llm.weight_version == 0
    assert _tokens(llm) == tokens_before


def test_an_update_that_passes_the_check_serves_like_a_freshly_loaded_model() -> None:
    llm = LLM(model=tiny_model("llama", 0), config=EngineConfig(**CONFIG))
    assert llm.update_weights(tiny_model("llama", 1).state_dict()) == 1
    fresh = LLM(model=tiny_model("llama", 1), config=EngineConfig(**CONFIG))
    assert _tokens(llm) == _tokens(fresh)


def test_without_the_option_the_same_update_commits_unchecked() -> None:
    """The default keeps updates as cheap as before: no forward runs at commit."""
    llm = LLM(model=tiny_model("llama", 0), config=EngineConfig(**{**CONFIG, "self_check_updates": False}))
    calls: list[int] = []
    llm.engine.model.register_forward_pre_hook(lambda *_: calls.append(1))
    llm.update_weights(tiny_model("llama", 1).state_dict())
    assert calls == [] and llm.weight_version == 1
