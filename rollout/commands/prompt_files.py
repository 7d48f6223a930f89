"""Where `rollout generate` reads prompts and writes results: both checked before the model loads.

A missing, unreadable or empty input and an output that cannot be written are usage errors (exit 2)
found in a moment; bad lines are only counted here (each is reported with its number, the others run).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from rollout.commands.jsonl import PROMPT_KEYS, LineError, PromptLine, parse_line
from rollout.commands.usage import UsageError
from rollout.sampling_params import SamplingParams


def check_output(path: str) -> None:
    """UsageError unless results could be written to `path` (before the model loads, not after)."""
    if path == "-":
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--output {path}: a directory; name a file, or - for stdout")
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"--output {path}: no directory {folder}; create it, or name another file")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"--output {path}: not writable; name another file, or - for stdout")


def read_prompts(path: str, base: SamplingParams) -> tuple[list[PromptLine], list[LineError]]:
    """The input's prompt lines and its bad lines; UsageError if it cannot be read or holds no line."""
    name = "stdin" if path == "-" else f"--input {path}"
    try:
        with open_path(path, "r", sys.stdin) as src:
            items, errors = parse_lines(src, base)
    except OSError as exc:
        raise UsageError(
            f"--input {path}: {exc.strerror or exc}; pass a JSONL file of prompts, or - for stdin"
        ) from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not items and not errors:
        raise UsageError(
            f"{name}: no prompts; give one JSON object per line, with one of {', '.join(PROMPT_KEYS)}"
        )
    return items, errors


def parse_lines(lines: Iterable[str], base: SamplingParams) -> tuple[list[PromptLine], list[LineError]]:
    items, errors = [], []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            items.append(parse_line(number, text, base))
        except LineError as exc:
            errors.append(exc)
    return items, errors


def open_path(path: str, mode: str, default: IO[str]) -> Any:
    if path == "-":
        from contextlib import nullcontext

        return nullcontext(default)
    return open(path, mode, encoding="utf-8")
