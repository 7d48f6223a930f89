"""Usage errors: the command line asks for something that cannot be. `rollout` prints the message as
one line and exits 2, as argparse does for its own checks; runtime failures exit 1."""

from __future__ import annotations

import re
from typing import Any


class UsageError(Exception):
    """A bad flag value or combination; the message names the flag and the fix."""


def flag_error(exc: ValueError, values: dict[str, Any], flags: dict[str, str]) -> UsageError:
    """A config's ValueError (its message starts with the field's name) as a UsageError that names the
    flag and the value given: `--dtype bf16: dtype must be ...`. `values`: field -> value given
    (None: not given); `flags`: field -> flag."""
    field = re.match(r"\w+", str(exc))
    name = field.group() if field else ""
    if values.get(name) is None:
        return UsageError(str(exc))
    value = values[name]
    shown = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else value
    return UsageError(f"{flags[name]} {shown}: {exc}")
