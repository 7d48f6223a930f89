"""`rollout bench` runs on the embedded model and every compared system does the same work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollout.cli import main as cli_main


def test_bench_compares_systems_on_identical_token_counts(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bench.json"
    argv = ["bench", "--prompts", "3", "--n", "2", "--new", "5", "--repeats", "1", "--compare", "generate"]
    assert cli_main([*argv, "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results) == {"rollout", "generate"}
    assert {r["tokens"] for r in results.values()} == {3 * 2 * 5}  # ignore_eos: fixed lengths everywhere
    assert "rollout / generate:" in capsys.readouterr().out


def test_bench_refuses_a_workload_longer_than_the_model_context() -> None:
    with pytest.raises(SystemExit, match="exceeds the model's context 64"):
        cli_main(["bench", "--prompt-len", "40", "50", "--new", "32"])
