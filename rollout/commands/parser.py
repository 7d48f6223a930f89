"""CommandParser: argparse for every `rollout` command, with usage errors as one line that names the fix.

argparse prints the whole usage (28 lines for `serve`) before its one-line message; here the message
comes alone, exit 2, with a "did you mean" for a mistyped command, choice or option, and a pointer to
`--help`.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable
from typing import Any, NoReturn


class CommandParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line on stderr, exit 2 (argparse's status for a usage error)."""
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            choices = [str(c) for c in action.choices or ()]
            hint = did_you_mean(str(value), choices)
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}{hint} (choose from {', '.join(choices)})"
            ) from exc

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.unrecognized(extra)
        return parsed

    def unrecognized(self, extra: list[str]) -> NoReturn:
        """Arguments no option or positional took; an option close to a known one is suggested."""
        options = [s for s in self._option_string_actions if s.startswith("--")]
        first = next((e.split("=", 1)[0] for e in extra if e.startswith("-")), "")
        self.error(f"unrecognized arguments: {' '.join(extra)}{did_you_mean(first, options)}")


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """'; did you mean X?' for the closest candidate, or '' when none is close."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6) if word else []
    return f"; did you mean {close[0]!r}?" if close else ""
