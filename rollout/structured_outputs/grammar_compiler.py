"""GrammarCompiler: StructuredOutputsParams -> a compiled grammar for the engine's tokenizer and vocabulary.

Compiling can take long (a large schema, a large vocabulary), so it runs where a request is
validated: the caller's thread offline, the RPC thread in the server (there in a worker process,
bounded in time and number: compile_pool.py). Results are cached by spec, so the engine loop's own
validation of the same request is a lookup, never a compile; a compile that fails or is cut caches
nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from rollout.structured_outputs.compile_pool import CompileLimits, CompilePool
from rollout.structured_outputs.compile_spec import choice_grammar, compile_spec, import_xgrammar

__all__ = ["CACHE_SIZE", "GrammarCompiler", "choice_grammar", "import_xgrammar"]
from rollout.structured_outputs.structured_outputs import StructuredOutputsParams

CACHE_SIZE = 256  # compiled grammars kept (the xgrammar objects are small next to a model)


class GrammarCompiler:
    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int]) -> None:
        xgr = import_xgrammar()
        self._info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_token_ids)
        )
        self._compiler = xgr.GrammarCompiler(self._info, max_threads=1, cache_enabled=False)
        self._pool: CompilePool | None = None  # set by `bound`: compiles in worker processes
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

    def bound(self, limits: CompileLimits) -> None:
        """From now on, compile in worker processes within `limits` (compile_pool.py)."""
        self._pool = CompilePool(self._info, limits)

    def _compile(self, spec: StructuredOutputsParams) -> Any:
        if self._pool is not None:
            return self._pool.compile(spec, lambda: compile_spec(self._compiler, spec))
        return compile_spec(self._compiler, spec)
