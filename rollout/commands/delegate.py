"""Subcommands implemented elsewhere (`bench`, `demo`): forward the remaining arguments to `main`."""

from __future__ import annotations

import argparse
import importlib


def register(subparsers: argparse._SubParsersAction, name: str, module: str, help_text: str) -> None:
    parser = subparsers.add_parser(name, help=help_text, add_help=False)
    parser.add_argument("args", nargs=argparse.REMAINDER, help=f"arguments for {module}.main")
    parser.set_defaults(run=lambda args: _run(module, args.args, args.owns_process))


def _run(module: str, argv: list[str], owns_process: bool) -> int:
    try:
        target = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise SystemExit(f"rollout: {module} is not available in this installation") from None
    return int(target.main(argv, owns_process=owns_process) or 0)
