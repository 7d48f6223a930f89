"""Forced tool calls: `tool_choice` "required" or a named function -> a grammar every sample follows.

vLLM forces them with its structured outputs; so do we, with one difference: the grammar is the tool
call as the request's tool parser reads it (tool_parsers.py), not a bare JSON array. The reply then
parses into `tool_calls` like any other, and the sampled tokens are the model's own tool-call
spelling, which its chat template writes back in later turns (the token-in prefix stays the model's).
Each call is the tool's name, fixed by the grammar, then arguments following the tool's `parameters`
schema (any JSON object when it has none); `parallel_tool_calls: false` allows exactly one call.
A server whose template shows no tool spelling (parser "none") gets `llama3_json`'s, read back by it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout.structured_outputs import StructuredOutputsParams

ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class Spelling:
    """How calls are written: `before_name` name `before_arguments` {arguments} `end`, calls joined by
    `separator` (the name as JSON string content: OpenAI's names need no escaping)."""

    before_name: str
    before_arguments: str
    end: str
    separator: str

    def begin(self, name: str) -> str:
        return f"{self.before_name}{json.dumps(name)[1:-1]}{self.before_arguments}"

    def call(self, name: str, arguments: str) -> str:
        return self.begin(name) + arguments + self.end


SPELLINGS = {
    "hermes": Spelling('<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>", "\n"),
    "llama3_json": Spelling('{"name": "', '", "parameters": ', "}", "; "),
}
FALLBACK_PARSER = "llama3_json"  # for a template that shows no tool-call spelling (parser "none")


@dataclass(frozen=True)
class ForcedCalls:
    """The grammar of the forced calls, the parser that reads them back, and whether one tool was named
    (OpenAI and vLLM then finish with "stop", not "tool_calls")."""

    spec: StructuredOutputsParams
    parser: str
    named: bool


def forced_calls(
    tool_choice: str | Mapping[str, Any] | None,
    tools: Sequence[Mapping[str, Any]] | None,
    parallel_tool_calls: bool | None,
    parser: str,
    spelling: Spelling | None = None,
) -> ForcedCalls | None:
    """None unless `tool_choice` forces a call; ValueError naming the field for a choice that cannot be
    honoured (an unknown mode, no tools, a name that is not among them). `tools` are checked already.
    `spelling`: the chat template's own (template_spelling.py), else the parser's usual one."""
    if tool_choice in (None, "auto", "none"):
        return None
    functions = [tool["function"] for tool in tools or ()]
    if tool_choice == "required":
        if not functions:
            raise ValueError('tool_choice: "required" needs tools; none were given')
        chosen, named = functions, False
    elif isinstance(tool_choice, Mapping):
        chosen, named = [_named(tool_choice, functions)], True
    else:
        raise ValueError(
            f'tool_choice: {tool_choice!r} is not one of "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}'
        )
    if parser not in SPELLINGS:
        parser, spelling = FALLBACK_PARSER, None
    single = named or parallel_tool_calls is False
    tag = structural_tag(chosen, spelling or SPELLINGS[parser], single)
    return ForcedCalls(StructuredOutputsParams(structural_tag=tag), parser, named)


def structural_tag(
    functions: Sequence[Mapping[str, Any]], spelling: Spelling, single: bool
) -> dict[str, Any]:
    """xgrammar's structural tag: one or more calls (exactly one when `single`), nothing around them."""
    tags = [
        {
            "type": "tag",
            "begin": spelling.begin(f["name"]),
            "content": {"type": "json_schema", "json_schema": f.get("parameters") or ANY_OBJECT},
            "end": spelling.end,
        }
        for f in functions
    ]
    calls = {
        "type": "tags_with_separator",
        "tags": tags,
        "separator": spelling.separator,
        "at_least_one": True,
        "stop_after_first": single,
    }
    return {"type": "structural_tag", "format": calls}


def _named(tool_choice: Mapping[str, Any], functions: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    if tool_choice.get("type") != "function":
        raise ValueError(f'tool_choice.type: must be "function", got {tool_choice.get("type")!r}')
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError('tool_choice.function.name: missing; name the function: {"function": {"name": ...}}')
    for candidate in functions:
        if candidate["name"] == name:
            return candidate
    known = ", ".join(repr(f["name"]) for f in functions) or "none"
    raise ValueError(f"tool_choice.function.name: {name!r} is not among the tools ({known})")
