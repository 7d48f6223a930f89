"""`rollout demo` end to end, shortened: a real loopback server, real pushes, real GRPO steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.cli import main as cli_main
from rollout.demo.main import build_parser, run


def test_short_demo_advances_the_version_every_round_and_keeps_its_reward(tmp_path: Path) -> None:
    plot = tmp_path / "reward.png"
    args = build_parser().parse_args(
        ["--rounds", "5", "--prompts", "16", "--eval-prompts", "32", "--plot", str(plot)]
    )
    history = run(args)
    assert [r.weight_version for r in history] == list(range(1, 6))
    rewards = [r.reward for r in history]
    assert min(rewards) > 0.1, rewards  # the default model starts around 0.33 at temperature 1
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 - 0.15, rewards  # no collapse
    assert all(r.logprob_drift < 1e-4 for r in history)  # server logprobs = trainer logprobs
    assert all(r.tokens_per_s > 0 and r.sync_s > 0 for r in history)
    assert plot.stat().st_size > 1000 and plot.read_bytes()[:4] == b"\x89PNG"


def test_demo_through_the_cli_prints_rounds_and_the_verdict(tmp_path: Path, capsys) -> None:
    assert (
        cli_main(["demo", "--rounds", "2", "--prompts", "4", "--n", "2", "--plot", str(tmp_path / "r.png")])
        == 0
    )
    out = capsys.readouterr().out
    assert "greedy acc" in out and "reward: first" in out and "weight version: 1 -> 2" in out


@pytest.mark.parametrize("flag", ["--rounds", "--prompts", "--n"])
def test_demo_refuses_non_positive_sizes(flag: str) -> None:
    with pytest.raises(SystemExit, match=flag):
        cli_main(["demo", flag, "0"])
