"""`rollout bench`: its options and its entry. It parses and checks them before it imports the benchmark
(torch, transformers), so `--help`, a bad option and a missing model answer at once, in one line."""

from __future__ import annotations

import argparse
from pathlib import Path

from rollout.commands.arg_types import positive_int
from rollout.commands.model_source import check_model
from rollout.commands.parser import CommandParser
from rollout.commands.usage import UsageError

DESCRIPTION = "output tokens/s of GRPO-shaped workloads, side by side with transformers' baselines"
BASELINES = ("generate", "generate_batch", "generate_batch_eager", "generate_static")  # side_by_side's


def build_parser() -> CommandParser:
    parser = CommandParser(prog="rollout bench", description=DESCRIPTION)
    parser.add_argument("--model", help="Hugging Face model directory (default: the embedded model)")
    parser.add_argument("--prompts", type=positive_int, default=64, help="prompts (default 64)")
    parser.add_argument("--n", type=positive_int, default=8, help="samples per prompt (default 8)")
    parser.add_argument(
        "--prompt-len", type=positive_int, nargs=2, metavar=("MIN", "MAX"), help="prompt token range"
    )
    parser.add_argument(
        "--new", type=positive_int, help="new tokens per sample (default 32, or 64 with --model)"
    )
    parser.add_argument("--repeats", type=positive_int, default=3, help="timed runs; the median is reported")
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
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)  # --help and bad options end here, before torch loads
    from rollout.bench.main import run

    return run(args, owns_process)


def check_args(parser: CommandParser, args: argparse.Namespace) -> None:
    """What can be refused without the model: a missing model, a reversed range, an unwritable --json."""
    if args.prompt_len and args.prompt_len[0] > args.prompt_len[1]:
        parser.error(f"--prompt-len {args.prompt_len[0]} {args.prompt_len[1]}: MIN is above MAX")
    if args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: no directory {args.json.parent}; create it, or name another file")
    if args.model:
        try:
            check_model(args.model)
        except UsageError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")
