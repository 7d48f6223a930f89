"""Engine options shared by `serve` and `generate`: one flag per EngineConfig field, kept in sync.

Flags default to None, meaning "EngineConfig's own default", so the CLI never restates defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rollout.config import EngineConfig

_RENAMED = {"seed": "engine-seed"}  # --seed is the sampling seed
_TYPES = {"int": int, "int | None": int, "float": float, "float | None": float, "str": str}


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model and engine")
    group.add_argument("--model", help="HF model id or path (default: the embedded default model)")
    group.add_argument("--tokenizer", help="tokenizer id or path (default: the model's)")
    for f in dataclasses.fields(EngineConfig):
        flag = "--" + _RENAMED.get(f.name, f.name.replace("_", "-"))
        kwargs = dict(
            dest=f"engine_{f.name}", default=None, help=f"EngineConfig.{f.name} (default {f.default})"
        )
        if f.type == "bool":
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            group.add_argument(flag, type=_TYPES[str(f.type)], **kwargs)


def engine_config(args: argparse.Namespace) -> EngineConfig:
    values = {f.name: getattr(args, f"engine_{f.name}") for f in dataclasses.fields(EngineConfig)}
    try:
        return EngineConfig(**{k: v for k, v in values.items() if v is not None})
    except ValueError as exc:
        raise SystemExit(f"rollout: invalid engine option: {exc}") from None


def model_path(args: argparse.Namespace) -> str | Path:
    """`--model`, or the embedded default model; a clear error while it is not shipped."""
    if args.model:
        return args.model
    try:
        from rollout.assets import default_model_path
    except ImportError:
        raise SystemExit(
            "rollout: no --model given and the embedded default model (rollout.assets) is not available "
            "in this installation; pass --model <HF id or path>"
        ) from None
    return default_model_path()
