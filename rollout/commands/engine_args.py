"""Engine options shared by `serve` and `generate`: one flag per EngineConfig field, kept in sync.

Flags default to None, meaning "EngineConfig's own default", so the CLI never restates defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from rollout.commands.model_source import check_model
from rollout.commands.usage import UsageError, flag_error
from rollout.config import EngineConfig

_RENAMED = {"seed": "engine-seed"}  # --seed is the sampling seed
_TYPES = {"int": int, "int | None": int, "float": float, "float | None": float, "str": str}


def add_engine_args(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """`skip`: EngineConfig fields a command sets otherwise (generate's per-request --logprobs-mode)."""
    group = parser.add_argument_group("model and engine")
    group.add_argument("--model", help="HF model id or path (default: the embedded default model)")
    group.add_argument("--tokenizer", help="tokenizer id or path (default: the model's)")
    for f in dataclasses.fields(EngineConfig):
        if f.name in skip:
            continue
        flag = "--" + _RENAMED.get(f.name, f.name.replace("_", "-"))
        kwargs = dict(
            dest=f"engine_{f.name}", default=None, help=f"EngineConfig.{f.name} (default {f.default})"
        )
        if f.type == "bool":
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            group.add_argument(flag, type=_TYPES[str(f.type)], **kwargs)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    values = {f.name: getattr(args, f"engine_{f.name}", None) for f in dataclasses.fields(EngineConfig)}
    try:
        return EngineConfig(**{k: v for k, v in values.items() if v is not None})
    except ValueError as exc:
        flags = {name: "--" + _RENAMED.get(name, name.replace("_", "-")) for name in values}
        raise flag_error(exc, values, flags) from None


def engine_flags_given(args: argparse.Namespace) -> list[str]:
    """The model and engine flags on the command line (they mean nothing to a remote server)."""
    given = [flag for flag in ("model", "tokenizer") if getattr(args, flag) is not None]
    for f in dataclasses.fields(EngineConfig):
        if getattr(args, f"engine_{f.name}", None) is not None:
            given.append(_RENAMED.get(f.name, f.name.replace("_", "-")))
    return [f"--{name.replace('_', '-')}" for name in given]


def engine_source(args: argparse.Namespace) -> tuple[str | Path, EngineConfig]:
    """The model to load and its EngineConfig, both checked before torch loads (UsageError if not)."""
    config = engine_config(args)
    model = model_path(args)
    if args.tokenizer:
        check_model(args.tokenizer, "--tokenizer", files=())
    return model, config


def model_path(args: argparse.Namespace) -> str | Path:
    """`--model` (a directory, or a Hugging Face id), or the embedded default model."""
    if args.model:
        check_model(args.model)
        return args.model
    try:
        from rollout.assets import default_model_path
    except ImportError:
        raise UsageError(
            "no --model given and the embedded default model (rollout.assets) is not available "
            "in this installation; pass --model <HF id or path>"
        ) from None
    return default_model_path()


@contextlib.contextmanager
def loading_model(model: str | Path) -> Iterator[None]:
    """A model that cannot be loaded (not on the Hub, offline, no config) fails in one line."""
    try:
        yield
    except OSError as exc:
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SystemExit(f"rollout: cannot load the model {model}: {cause}") from None
