"""`rollout bench`: its options and its entry. It parses before it imports the benchmark (torch,
transformers), so `--help` and a bad option answer at once."""

from __future__ import annotations

import argparse
from pathlib import Path

DESCRIPTION = "output tokens/s of GRPO-shaped workloads, side by side with transformers' baselines"
BASELINES = ("generate", "generate_batch", "generate_batch_eager", "generate_static")  # side_by_side's


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollout bench", description=DESCRIPTION)
    parser.add_argument("--model", help="Hugging Face model directory (default: the embedded model)")
    parser.add_argument("--prompts", type=int, default=64, help="prompts (default 64)")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (default 8)")
    parser.add_argument("--prompt-len", type=int, nargs=2, metavar=("MIN", "MAX"), help="prompt token range")
    parser.add_argument("--new", type=int, help="new tokens per sample (default 32, or 64 with --model)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is reported")
    parser.add_argument("--device", help="torch device (default cuda when available, else cpu)")
    parser.add_argument(
        "--compare",
        nargs="*",
        choices=BASELINES,
        default=["generate_static", "generate", "generate_batch"],
        help="baselines to run beside rollout (default: all but generate_batch_eager)",
    )
    parser.add_argument(
        "--workloads", nargs="+", choices=["fixed", "variable"], default=["fixed", "variable"]
    )
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    return parser


def main(argv: list[str] | None = None, owns_process: bool = False) -> int:
    """`owns_process`: run as a program (`rollout bench`), not by code that keeps the process."""
    build_parser().parse_args(argv)  # --help and bad options end here, before torch loads
    from rollout.bench.main import main as run

    return run(argv, owns_process)
