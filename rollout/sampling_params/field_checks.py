"""The checks every settings object and front end makes of a user's value: an integer with a floor, a
finite number, Unicode text.

Shared by SamplingParams, the logits settings, prompts and chat messages so one wording names the field
everywhere.
"""

from __future__ import annotations

from math import isfinite


def check_int(name: str, value: object, minimum: int) -> None:
    """ValueError naming `name` unless `value` is an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def check_finite(name: str, value: object) -> None:
    """ValueError naming `name` unless `value` is a finite int or float (not a bool, NaN or inf)."""
    finite = isinstance(value, int) or (isinstance(value, float) and isfinite(value))  # ints always are
    if isinstance(value, bool) or not finite:
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def check_unicode(name: str, text: str) -> None:
    """ValueError naming `name` when `text` holds a lone surrogate: JSON's `"\\ud800"` escape decodes to
    one, it is no Unicode text, and no tokenizer encodes it (fast tokenizers raise a TypeError)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name}: holds a lone surrogate (U+{ord(text[exc.start]):04X} at character {exc.start}), "
            "which is not Unicode text; send UTF-8 text"
        ) from None
