"""`rollout serve`'s flags parsed and checked away from the command line (a fleet's replicas take them).

`rollout fleet serve` checks the replicas' flags with it before Ray starts, and each replica parses
the same list to load its engine exactly as `rollout serve` would.
"""

from __future__ import annotations

import argparse

from rollout.commands import serve
from rollout.commands.parser import CommandParser


def parse_serve_flags(flags: list[str]) -> argparse.Namespace:
    """`rollout serve <flags>` as its parser reads them; exits 2 naming a bad flag, as the CLI does."""
    parser = CommandParser(prog="rollout")
    serve.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["serve", *flags])
