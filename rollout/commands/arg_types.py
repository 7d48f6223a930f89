"""argparse types for counts, sizes and durations: a value that cannot mean anything (0 MiB messages, a
negative grace) is refused while parsing, as one line naming the flag, not accepted and met later."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    value = _number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not >= 1")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float, "a number")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not > 0")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float, "a number")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not >= 0")
    return value


def _number(text: str, kind: type, what: str) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value != value or value in (float("inf"), float("-inf")):  # nan, inf: not a count or a duration
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value
