"""The model names the OpenAI API answers to: `rollout serve --served-model-name` (vLLM's flag).

A request's `model` may be any of them; replies name the first, and /v1/models lists them all, as
vLLM's server does. Without the flag the API answers to the engine's model name alone (gRPC's
GetServerInfo keeps that name whatever the flag says).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class ModelNotFoundError(LookupError):
    """The request names a model this server does not serve (404)."""


@dataclass(frozen=True)
class ServedNames:
    names: tuple[str, ...]

    @classmethod
    def of(cls, names: Sequence[str] | None, default: str) -> ServedNames:
        """`names` when given, else the engine's own name; ValueError naming the flag for a bad one."""
        if names is None:
            return cls((default,))
        if isinstance(names, str) or not names:
            raise ValueError(f"served_model_name: give one or more names, got {names!r}")
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"served_model_name: each name must be a non-empty string, got {name!r}")
        return cls(tuple(dict.fromkeys(names)))

    @property
    def primary(self) -> str:
        """The name replies report."""
        return self.names[0]

    def check(self, model: str) -> None:
        if model not in self.names:
            served = ", ".join(repr(n) for n in self.names)
            raise ModelNotFoundError(f"model: {model!r} is not served here; this server serves {served}")
