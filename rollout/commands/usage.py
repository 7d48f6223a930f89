"""Usage errors: the command line asks for something that cannot be. `rollout` prints the message as
one line and exits 2, as argparse does for its own checks; runtime failures exit 1."""

from __future__ import annotations


class UsageError(Exception):
    """A bad flag value or combination; the message names the flag and the fix."""
