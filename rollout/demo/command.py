"""`rollout demo`: its options and its entry. It parses before it imports the demo (torch,
transformers), so `--help` and a bad option answer at once."""

from __future__ import annotations

from pathlib import Path

from rollout.commands.arg_types import positive_float, positive_int
from rollout.commands.parser import CommandParser

DESCRIPTION = "a server on loopback, a GRPO trainer against it, weights pushed every round"


def build_parser() -> CommandParser:
    parser = CommandParser(prog="rollout demo", description=DESCRIPTION)
    parser.add_argument("--rounds", type=positive_int, default=40, help="GRPO rounds (default 40)")
    parser.add_argument("--prompts", type=positive_int, default=64, help="prompts per round (default 64)")
    parser.add_argument("--n", type=positive_int, default=8, help="samples per prompt (default 8)")
    parser.add_argument(
        "--learning-rate", type=positive_float, default=3e-4, help="Adam learning rate (default 3e-4)"
    )
    parser.add_argument(
        "--eval-prompts", type=positive_int, default=128, help="held-out prompts for greedy accuracy"
    )
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
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.plot.parent.is_dir():
        parser.error(f"--plot {args.plot}: no directory {args.plot.parent}; create it, or name another file")
    from rollout.demo.main import run

    run(args, owns_process)
    return 0
