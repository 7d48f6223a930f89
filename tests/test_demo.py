"""`rollout demo` end to end, shortened: a real loopback server, real pushes, real GRPO steps."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rollout.cli import main as cli_main
from rollout.demo import overlap
from rollout.demo.command import build_parser
from rollout.demo.main import run


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
def test_demo_refuses_non_positive_sizes(flag: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(["demo", flag, "0"])
    assert exit_.value.code == 2
    assert f"rollout demo: error: argument {flag}: 0 is not >= 1" in capsys.readouterr().err


def test_overlapped_rounds_generate_the_next_round_before_learning_from_this_one() -> None:

    events: list[str] = []
    started = [threading.Event() for _ in range(4)]

    def push(in_flight: str) -> float:
        events.append(f"push {in_flight}")
        return 0.0

    def generate(round_: int) -> int:
        events.append(f"generate {round_}")
        started[round_].set()
        return round_

    def learn(round_: int, batch: int, sync_s: float) -> int:
        assert batch == round_
        if round_ < 2:  # the next round is already generating while this one is learned from
            assert started[round_ + 1].wait(10)
        events.append(f"learn {round_}")
        return round_

    assert overlap.overlapped(3, push, generate, learn) == [0, 1, 2]
    # lag 1: round t+1 is generating before round t is learned from; updates after learning land in flight
    assert events.index("generate 1") < events.index("learn 0") < events.index("push keep")
    assert events.count("push keep") == 2 and events[0] == "push wait"
    events.clear()
    in_order = lambda round_, batch, sync_s: events.append(f"learn {round_}") or batch  # noqa: E731
    assert overlap.synchronous(2, push, generate, in_order) == [0, 1]
    assert events == ["push wait", "generate 0", "learn 0", "push wait", "generate 1", "learn 1"]


def test_demo_async_prints_wall_time_and_rewards_beside_the_synchronous_run(tmp_path: Path, capsys) -> None:
    argv = ["demo", "--async", "--rounds", "3", "--prompts", "4", "--n", "4", "--eval-prompts", "8"]
    assert cli_main([*argv, "--plot", str(tmp_path / "r.png")]) == 0
    out = capsys.readouterr().out
    assert "wall time: sync" in out and "async reward: first" in out and "sync reward: first" in out
