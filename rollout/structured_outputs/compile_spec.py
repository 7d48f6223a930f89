"""One StructuredOutputsParams compiled by an xgrammar.GrammarCompiler: in the server's process, or in a
compile worker (compile_pool.py); the one place that imports the grammar library."""

from __future__ import annotations

import json
from typing import Any

from rollout.structured_outputs.structured_outputs import StructuredOutputsParams


def compile_spec(compiler: Any, spec: StructuredOutputsParams) -> Any:
    """`spec` compiled by an xgrammar.GrammarCompiler; ValueError naming the field if it does not compile."""
    kind = spec.kind
    try:
        if kind == "json":
            json.loads(spec.json)  # a readable error for text that is not JSON at all
            return compiler.compile_json_schema(spec.json, any_whitespace=not spec.disable_any_whitespace)
        if kind == "json_object":
            return compiler.compile_json_schema(
                '{"type": "object"}', any_whitespace=not spec.disable_any_whitespace
            )
        if kind == "regex":
            return compiler.compile_regex(spec.regex)
        if kind == "choice":
            return compiler.compile_grammar(choice_grammar(spec.choice))
        if kind == "structural_tag":
            json.loads(spec.structural_tag)
            return compiler.compile_structural_tag(spec.structural_tag)
        return compiler.compile_grammar(spec.grammar)
    except (RuntimeError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"structured_outputs.{kind}: does not compile: {_tail(reason)}") from None


def choice_grammar(choices: tuple[str, ...]) -> str:
    """vLLM's choice: an EBNF alternation of the literal strings (JSON string escapes are EBNF's)."""
    return "root ::= " + " | ".join(json.dumps(c) for c in choices)


def import_xgrammar() -> Any:
    try:
        import xgrammar
    except ImportError:
        raise ValueError(
            'structured_outputs: needs the grammar library: pip install "rollout[structured]" (xgrammar)'
        ) from None
    return xgrammar


def _tail(reason: str) -> str:
    """xgrammar prefixes its messages with a timestamp and a C++ source location."""
    return reason.split(": ", 1)[1] if reason.startswith("[") and ": " in reason else reason
