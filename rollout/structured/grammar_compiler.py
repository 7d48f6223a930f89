"""GrammarCompiler: StructuredOutputsParams -> a compiled grammar for the engine's tokenizer and vocabulary.

Compiling can take long (a large schema, a large vocabulary), so it runs where a request is
validated: the caller's thread offline, the RPC thread in the server. Results are cached by spec,
so the engine loop's own validation of the same request is a lookup, never a compile.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from rollout.structured_outputs import StructuredOutputsParams

CACHE_SIZE = 256  # compiled grammars kept (the xgrammar objects are small next to a model)


class GrammarCompiler:
    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int]) -> None:
        xgr = import_xgrammar()
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_token_ids)
        )
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self._cache: OrderedDict[StructuredOutputsParams, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.num_compiled = 0  # compiles done (cache misses): tests check where they happen
        self.compile_threads: set[str] = set()

    def compile(self, spec: StructuredOutputsParams) -> Any:
        """The compiled grammar (xgrammar.CompiledGrammar); ValueError naming the field if it does not compile."""
        with self._lock:
            if spec in self._cache:
                self._cache.move_to_end(spec)
                return self._cache[spec]
        compiled = self._compile(spec)
        with self._lock:
            self.num_compiled += 1
            self.compile_threads.add(threading.current_thread().name)
            self._cache[spec] = compiled
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled

    def _compile(self, spec: StructuredOutputsParams) -> Any:
        kind = spec.kind
        try:
            if kind == "json":
                json.loads(spec.json)  # a readable error for text that is not JSON at all
                return self._compiler.compile_json_schema(
                    spec.json, any_whitespace=not spec.disable_any_whitespace
                )
            if kind == "json_object":
                return self._compiler.compile_json_schema(
                    '{"type": "object"}', any_whitespace=not spec.disable_any_whitespace
                )
            if kind == "regex":
                return self._compiler.compile_regex(spec.regex)
            if kind == "choice":
                return self._compiler.compile_grammar(choice_grammar(spec.choice))
            return self._compiler.compile_grammar(spec.grammar)
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
