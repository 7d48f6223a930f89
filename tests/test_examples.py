"""The examples run as a user runs them (a subprocess each, shortened), so they cannot rot silently."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, *args: str, cwd: Path) -> str:
    """Runs an example with its own temporary folder, which it must leave empty (no leaked checkpoints)."""
    tmp = cwd / "tmp"
    tmp.mkdir()
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=1800,  # a hang guard: agent_loop's supervised phase alone took 330 s on 2 busy cores
        cwd=cwd,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(tmp.glob("rollout-weights-*")), "the example left its weight checkpoints behind"
    return result.stdout


def test_offline_generate(tmp_path: Path) -> None:
    out = run_example("offline_generate.py", cwd=tmp_path)
    assert out.count("finish stop") + out.count("finish length") == 16  # 4 prompts x n=4
    assert "'num_blocks_free': 1024" in out  # every block back in the pool


def test_serve_and_query(tmp_path: Path) -> None:
    out = run_example("serve_and_query.py", cwd=tmp_path)
    assert "weight version 0" in out and "rollout_generated_tokens_total" in out


@pytest.mark.parametrize("transport", ["grpc", "disk"])
def test_custom_loop_pushes_a_new_version_every_step(tmp_path: Path, transport: str) -> None:
    out = run_example("custom_loop.py", "--steps", "2", "--transport", transport, cwd=tmp_path)
    assert re.findall(r"weights v(\d+)", out) == ["1", "2"]
    drifts = [float(d) for d in re.findall(r"\|logp drift\| (\S+)", out)]
    assert drifts and max(drifts) < 1e-4


def test_grpo_trl(tmp_path: Path) -> None:
    out = run_example("grpo_trl.py", "--steps", "2", "--output-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert "mean reward: first step" in out


def test_grpo_vlm_trains_a_vision_language_model_on_image_prompts(tmp_path: Path) -> None:
    out = run_example("grpo_vlm.py", "--steps", "2", "--output-dir", str(tmp_path / "out"), cwd=tmp_path)
    assert "reward: first" in out and "importance ratio 1" in out


def test_custom_loop_async_overlaps_generation_and_reports_the_sampling_versions(tmp_path: Path) -> None:
    out = run_example("custom_loop.py", "--steps", "3", "--async", cwd=tmp_path)
    pushed = [int(v) for v in re.findall(r"weights v(\d+)", out)]
    sampled = [[int(v) for v in vs.split(",")] for vs in re.findall(r"sampled by v\[([\d, ]+)\]", out)]
    assert pushed == [1, 2, 3] and len(sampled) == 3
    # lag <= 1: a round is sampled by the weights pushed before it or the one pushed during it
    assert all(pushed[i] - 1 <= min(vs) <= max(vs) <= pushed[i] for i, vs in enumerate(sampled))


def test_agent_loop_trains_on_token_exact_tool_using_trajectories_and_serves_the_pushed_version(
    tmp_path: Path,
) -> None:
    out = run_example("agent_loop.py", "--rounds", "2", cwd=tmp_path)
    served = re.findall(r"served at weight version \[([\d, ]+)\]", out)
    assert served == ["0", "1"]  # round 1 sampled entirely by the weights pushed after round 0
    drifts = [float(d) for d in re.findall(r"max \|server - trainer logp\| (\S+),", out)]
    assert len(drifts) == 2 and max(drifts) <= 1e-4
    # the server's tool_calls equal the calls in the model's own token ids (checked in the example)
    assert int(re.search(r"tool calls parsed == emitted: (\d+)", out).group(1)) > 0
    hit, reusable = map(int, re.search(r"turn k\+1: (\d+) of (\d+) reusable", out).groups())
    print(f"turn k+1 prefix hit rate on turn k's tokens: {hit}/{reusable}")
    assert reusable > 0 and hit == reusable


@pytest.mark.parametrize("framework", ["plain", "agents-sdk"])
def test_agent_trajectories_records_token_exact_prefix_stable_episodes(
    tmp_path: Path, framework: str
) -> None:
    if framework == "agents-sdk":
        pytest.importorskip("agents", reason="the OpenAI Agents SDK is an optional extra of the example")
    out = run_example("agent_trajectories.py", *(["--plain"] if framework == "plain" else []), cwd=tmp_path)
    assert ("Agents SDK" in out) == (framework == "agents-sdk")
    assert out.count(", stable=True)") == 3  # each episode's second turn continues its first exactly
    assert "TRL rollout_func batch: 3 samples" in out and "every turn prefix-stable: True" in out
