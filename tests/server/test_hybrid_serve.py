"""`rollout serve --model <dir>` of a saved hybrid (Nemotron-H) and a recurrent model (Mamba-2) as a real
process: the client's n samples with logprobs equal the offline engine's, the server reports its state
figures, and a repeated prompt resumes from a state snapshot."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from rollout.client import RolloutClient
from tests.builders import char_tokenizer, random_prompts
from tests.serve_process import announced_address, start_serve, stop_server
from tests.server.hybrid_builders import HYBRIDS, MAX_MODEL_LEN, save_hybrid

pytestmark = pytest.mark.slow  # a `rollout serve` process per model

SAMPLED = SamplingParams(n=3, max_tokens=8, temperature=1.0, seed=0, logprobs=2)
PROMPTS = random_prompts(2, 20, 40, seed=3)


@pytest.fixture(scope="module", params=HYBRIDS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    """(the model directory, the address of a `rollout serve` of it)."""
    root = tmp_path_factory.mktemp(request.param)
    model = save_hybrid(root / "model", request.param, char_tokenizer())
    log = root / "serve.log"
    process = start_serve(["--model", str(model), "--port", "0", "--max-model-len", str(MAX_MODEL_LEN)], log)
    try:
        yield model, announced_address(process, log)
    finally:
        stop_server(process)


def test_n_samples_with_logprobs_from_rollout_serve_equal_the_offline_engines(
    served: tuple[Path, str],
) -> None:
    model, address = served
    with RolloutClient(address, timeout=60) as client:
        remote = client.generate(PROMPTS, SAMPLED)
    local = LLM(str(model), config=EngineConfig(max_model_len=MAX_MODEL_LEN)).generate(PROMPTS, SAMPLED)
    for got, want in zip(remote, local, strict=True):
        assert [s.token_ids for s in got.outputs] == [s.token_ids for s in want.outputs]
        for a, b in zip(got.outputs, want.outputs, strict=True):
            assert len(a.token_logprobs) == len(a.top_logprobs) == SAMPLED.max_tokens
            assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-5)


def test_a_repeated_prompt_resumes_from_a_state_snapshot_and_samples_the_same(
    served: tuple[Path, str],
) -> None:
    _, address = served
    prompt = random_prompts(1, 50, 50, seed=7)  # 3 full blocks of 16: the second call hits 48 tokens
    with RolloutClient(address, timeout=60) as client:
        info = client.server_info()
        first = client.generate(prompt, SAMPLED)
        hits = metric(client.metrics(), "prefix_hit_tokens_total")
        again = client.generate(prompt, SAMPLED)
        text = client.metrics()
    assert info.prefix_caching and info.max_state_snapshots > 0 and info.state_bytes_per_seq > 0
    assert metric(text, "prefix_hit_tokens_total") - hits == 48
    assert metric(text, "state_snapshots") > 0 and metric(text, "state_slots_used") == 0
    assert [s.token_ids for s in again[0].outputs] == [s.token_ids for s in first[0].outputs]


def metric(prometheus_text: str, name: str) -> float:
    (value,) = re.findall(rf"^rollout_{name} (\S+)$", prometheus_text, re.MULTILINE)
    return float(value)
