"""The example of docs/engine_api.md ("Sampler replay"), run as written against a real gRPC server: the
importance ratio it computes is 1 up to numerics, and the logprobs carry the trainer's gradient."""

from __future__ import annotations

import re
from pathlib import Path

from tests.builders import char_tokenizer, tiny_model
from tests.server.server_builders import make_engine, serving

DOC = Path(__file__).resolve().parents[2] / "docs" / "engine_api.md"


def documented_example() -> str:
    section = DOC.read_text().split("## Sampler replay", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_documented_example_gives_ratio_one_with_gradients() -> None:
    tokenizer = char_tokenizer()
    with serving(make_engine(seed=0, tokenizer=tokenizer)) as server:
        scope = {"tokenizer": tokenizer, "model": tiny_model("llama", 0), "prompt_ids": [[5, 6, 7], [8, 9]]}
        exec(documented_example().replace("127.0.0.1:50051", server.address), scope)
        scope["client"].close()
    assert (scope["ratio"] - 1).abs().max().item() < 1e-4
    scope["logp"].sum().backward()
    assert scope["model"].lm_head.weight.grad.abs().sum() > 0
