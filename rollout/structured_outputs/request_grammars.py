"""RequestGrammars: the engine's door to structured outputs: a request's params -> its compiled grammar.

The compiler (and the tokenizer's token table it needs, ~0.1 s) is built on first use, so engines
that never see structured outputs never import the grammar library.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from rollout.sampling_params import SamplingParams
from rollout.structured_outputs.compile_pool import CompileLimits
from rollout.structured_outputs.grammar_compiler import GrammarCompiler


class RequestGrammars:
    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_token_ids = frozenset(stop_token_ids)
        self._compiler: GrammarCompiler | None = None
        self._limits: CompileLimits | None = None  # set by a server: compiles bounded (compile_pool.py)
        self._lock = threading.Lock()

    def compile(self, params: SamplingParams) -> Any | None:
        """None without structured_outputs; else the compiled grammar, or ValueError naming the field."""
        spec = params.structured_outputs
        if spec is None:
            return None
        if self._tokenizer is None:
            raise ValueError(
                "structured_outputs: grammars are matched against token strings, and this model has no tokenizer"
            )
        return self.compiler.compile(spec)

    def bound(self, limits: CompileLimits) -> None:
        """Compiles from now on run in worker processes, at most `limits.workers` at once, each cut after
        `limits.timeout_s` (a server's setting; offline, a compile runs on the caller's thread)."""
        with self._lock:
            self._limits = limits
            if self._compiler is not None:
                self._compiler.bound(limits)

    @property
    def compiler(self) -> GrammarCompiler:
        with self._lock:
            if self._compiler is None:
                self._compiler = GrammarCompiler(self._tokenizer, self._vocab_size, self._stop_token_ids)
                if self._limits is not None:
                    self._compiler.bound(self._limits)
            return self._compiler
