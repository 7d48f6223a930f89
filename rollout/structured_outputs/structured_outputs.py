"""StructuredOutputsParams: what a sample's text must follow (vLLM's names and shapes).

Exactly one of json (a JSON schema, as a dict or its text), regex, choice (a list of strings),
grammar (EBNF, xgrammar's dialect), json_object (any JSON object) or structural_tag (xgrammar's
structural tag, as a dict or its JSON text: tags around JSON-schema content, what forced tool calls
compile to). Plain data: the grammar is compiled by rollout/structured_outputs/grammar_compiler.py,
off the engine loop's thread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


@dataclass(frozen=True)
class StructuredOutputsParams:
    """vLLM's StructuredOutputsParams; a dict schema is kept as its canonical JSON text (hashable)."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | dict[str, Any] | None = None
    # vLLM's option: JSON without optional whitespace (compact output; json and json_object only)
    disable_any_whitespace: bool = False

    def __post_init__(self) -> None:
        set_kinds = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(set_kinds) != 1:
            raise ValueError(
                f"structured_outputs: set exactly one of {', '.join(KINDS)}, got {set_kinds or 'none'}"
            )
        for name in ("json", "structural_tag"):
            if isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, _dumps(getattr(self, name), name))
        for name in ("json", "regex", "grammar", "structural_tag"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"structured_outputs.{name} must be a non-empty string, got {value!r}")
        if self.choice is not None:
            object.__setattr__(self, "choice", _choices(self.choice))
        if self.json_object is not None and self.json_object is not True:
            raise ValueError(
                f"structured_outputs.json_object must be True or unset, got {self.json_object!r}"
            )
        if not isinstance(self.disable_any_whitespace, bool):
            raise ValueError(
                f"structured_outputs.disable_any_whitespace must be a bool, got {self.disable_any_whitespace!r}"
            )

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) not in (None, False))


def structured_outputs_from(value: object) -> StructuredOutputsParams | None:
    """None, a StructuredOutputsParams, or a dict of its fields (vLLM accepts both)."""
    if value is None or isinstance(value, StructuredOutputsParams):
        return value
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(KINDS) - {"disable_any_whitespace"})
        if unknown:
            raise ValueError(
                f"structured_outputs: unknown key {unknown[0]!r} (known: {', '.join(KINDS)}, disable_any_whitespace)"
            )
        return StructuredOutputsParams(**value)
    raise ValueError(
        f"structured_outputs must be StructuredOutputsParams or a dict, got {type(value).__name__}"
    )


def _dumps(value: dict[str, Any], name: str) -> str:
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"structured_outputs.{name}: not JSON ({exc})") from None


def _choices(choice: object) -> tuple[str, ...]:
    if isinstance(choice, str) or not isinstance(choice, (list, tuple)) or not choice:
        raise ValueError(f"structured_outputs.choice must be a non-empty list of strings, got {choice!r}")
    for item in choice:
        if not isinstance(item, str) or not item:
            raise ValueError(f"structured_outputs.choice must hold non-empty strings, got {item!r}")
    return tuple(choice)
