"""`rollout demo`: its options and its entry. It parses before it imports the demo (torch,
transformers), so `--help` and a bad option answer at once."""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = "a server on loopback, a GRPO trainer against it, weights pushed every round"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollout demo", description=DESCRIPTION)
    parser.add_argument("--rounds", type=int, default=40, help="GRPO rounds (default 40)")
    parser.add_argument("--prompts", type=int, default=64, help="prompts per round (default 64)")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (default 8)")
    parser.add_argument("--learning-rate", type=float, default=3e-4, help="Adam learning rate (default 3e-4)")
    parser.add_argument("--eval-prompts", type=int, default=128, help="held-out prompts for greedy accuracy")
    parser.add_argument("--plot", type=Path, default=Path("rollout_demo_reward.png"), help="reward curve PNG")
    parser.add_argument("--seed", type=int, default=0, help="seed of prompts, sampling and torch")
    parser.add_argument(
        "--async",
        dest="overlap",
        action="store_true",
        help="also train with generation overlapped (round t+1 generates while round t trains, "
        "updates land in flight with policy keep) and compare wall time and reward with the synchronous run",
    )
    return parser


def main(argv: list[str] | None = None, owns_process: bool = False) -> int:
    """`owns_process`: run as a program (`rollout demo`), not by code that keeps the process."""
    args = build_parser().parse_args(argv)
    from rollout.demo.main import run

    run(args, owns_process)
    return 0
