"""Model families whose attention features live in the Triton kernels, end to end through the engine.

gpt-oss (sinks), MLA (V zero-padded to K's width), Gemma 4 (per-layer head sizes): greedy tokens equal
transformers' `generate` with attention_backend="triton" (the interpreter on CPU, compiled on CUDA).
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from rollout import LLM, EngineConfig, SamplingParams  # noqa: E402
from tests.models.test_zoo import PROMPT, greedy_generate  # noqa: E402
from tests.models.zoo import SUPPORTED, build  # noqa: E402

_INTERPRETING = type(triton.language.standard.max).__name__ == "InterpretedFunction"
pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(
        not torch.cuda.is_available() and not _INTERPRETING,
        reason="no CUDA and triton was imported before TRITON_INTERPRET=1 was set",
    ),
]


@pytest.mark.parametrize("model_type", ["gpt_oss", "minicpm3", "gemma4_text"])
def test_triton_backend_runs_model_features_exactly(model_type: str) -> None:
    family = next(f for f in SUPPORTED if f.model_type == model_type)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    want = greedy_generate(build(family), PROMPT, 4)
    config = EngineConfig(
        num_blocks=32,
        block_size=4,
        max_model_len=64,
        max_num_batched_tokens=5,
        attention_backend="triton",
        device=device,
        dtype="float32",
        enforce_eager=True,
    )
    llm = LLM(model=build(family), config=config)
    sample = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))[0].outputs[
        0
    ]
    assert list(sample.token_ids) == want
