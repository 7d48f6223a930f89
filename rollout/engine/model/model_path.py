"""A model named by a path that does not exist is refused in one line naming it, before transformers
turns it into a Hub lookup ("Repo id must be in the form 'repo_name'...")."""

from __future__ import annotations

import os
from pathlib import Path


def check_model_path(model: str | os.PathLike) -> None:
    """ValueError naming `model` when it reads as a local path (absolute, ./, ../, ~, or more than one
    '/') and no directory is there; a Hub id ('org/name') is left to transformers."""
    text = os.fspath(model)
    path = Path(text).expanduser()
    if path.is_dir():
        return
    if path.exists():
        raise ValueError(f"model: {text!r} is a file, not a model directory; pass the directory holding it")
    if _reads_as_path(text):
        raise ValueError(f"model: no such directory {text!r}; pass a Hugging Face model directory or Hub id")


def _reads_as_path(text: str) -> bool:
    if text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or text in (".", ".."):
        return True
    if os.sep != "/" and os.sep in text:
        return True
    return text.count("/") > 1 or not text.strip()
