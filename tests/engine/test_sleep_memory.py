"""Sleep mode gives memory back to the operating system: the process's resident size drops by >= 80% of the
KV cache at level 1 and of the KV cache and the weights at level 2 (measured from /proc; a generous margin
for the allocator's noise), and waking restores exact outputs."""

from __future__ import annotations

import gc
import sys

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.sleep.host_memory import give_back, rss_bytes
from rollout.engine.sleep.released_storage import nbytes
from tests.builders import random_prompts, tiny_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

MB = 1 << 20


def build() -> LLM:
    model = tiny_model(seed=0, hidden_size=512, intermediate_size=1024, num_hidden_layers=4)  # ~40 MB fp32
    return LLM(model=model, config=EngineConfig(num_blocks=512, self_check=False))  # KV: 32 MB


def kv_and_weight_bytes(llm: LLM) -> tuple[int, int]:
    kv = nbytes(t for pair in llm.engine.local_runner.kv_caches for t in pair)
    return kv, nbytes(llm.engine.model.parameters())


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_gives_the_memory_back_to_the_os(level: int) -> None:
    llm = build()
    prompts = random_prompts(3, 5, 30, seed=1)
    params = SamplingParams(max_tokens=8, temperature=0.0, logprobs=0)
    before = [c.token_ids for o in llm.generate(prompts, params) for c in o.outputs]
    kv, weights = kv_and_weight_bytes(llm)
    expected = kv + (weights if level == 2 else 0)
    gc.collect()  # what earlier tests left is not counted
    give_back(torch.device("cpu"))
    awake = rss_bytes()
    llm.sleep(level=level)
    dropped = awake - rss_bytes()
    assert dropped >= 0.8 * expected, f"RSS dropped {dropped / MB:.1f} MB of {expected / MB:.1f} MB"
    llm.wake_up()
    if level == 2:
        llm.update_weights(tiny_model(seed=0, hidden_size=512, intermediate_size=1024, num_hidden_layers=4))
    assert [c.token_ids for o in llm.generate(prompts, params) for c in o.outputs] == before
