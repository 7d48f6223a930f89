"""The `rollout` command: a small dispatcher.

`serve` and `generate` parse their arguments in rollout/commands/; `bench` and `demo` are handed on
(commands/delegate.py) to rollout/bench/command.py and rollout/demo/command.py, which parse their own.
Command modules import torch only when they run, so `--help`, `--version` and every usage or input
error answer at once. Usage errors are one line naming the fix (commands/parser.py) and exit 2; Ctrl-C
is one line and exits 130.
"""

from __future__ import annotations

import logging
import sys

import rollout
from rollout.commands import delegate, fleet, generate, serve
from rollout.commands.parser import CommandParser
from rollout.commands.usage import UsageError

INTERRUPTED = 128 + 2  # the shell's status for a process stopped by SIGINT


def build_parser() -> CommandParser:
    parser = CommandParser(prog="rollout", description="RL rollout generation service.")
    parser.add_argument("--version", action="version", version=f"rollout {rollout.__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level (default INFO)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve.register(subparsers)
    generate.register(subparsers)
    fleet.register(subparsers)
    delegate.register(subparsers, "bench", "rollout.bench.command", "run the throughput benchmark")
    delegate.register(subparsers, "demo", "rollout.demo.command", "run the demo")
    for sub in subparsers.choices.values():
        sub.set_defaults(command_parser=sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command `argv` names (default: this program's arguments). Only as the program does a
    command treat the process as its own (rollout/gc_heap.py)."""
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
        if args.command is None:
            parser.error("name a command: serve, generate, fleet, bench or demo")
        if extra and not hasattr(args, "args"):
            args.command_parser.unrecognized(extra)
        if extra:  # delegated subcommands (bench, demo) parse their own options
            args.args = extra + args.args
        args.owns_process = argv is None  # run as the program, not called by code that owns the process
        logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        # huggingface_hub logs through a handler of its own: propagated to ours too, each line came twice
        logging.getLogger("huggingface_hub").propagate = False
        return int(args.run(args) or 0)
    except UsageError as exc:
        print(f"rollout {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rollout: interrupted", file=sys.stderr, flush=True)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
