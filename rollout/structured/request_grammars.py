"""RequestGrammars: the engine's door to structured outputs: a request's params -> its compiled grammar.

The compiler (and the tokenizer's token table it needs, ~0.1 s) is built on first use, so engines
that never see structured outputs never import the grammar library.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from rollout.sampling_params import SamplingParams
from rollout.structured.grammar_compiler import GrammarCompiler


class RequestGrammars:
    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_token_ids = frozenset(stop_token_ids)
        self._compiler: GrammarCompiler | None = None
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

    @property
    def compiler(self) -> GrammarCompiler:
        with self._lock:
            if self._compiler is None:
                self._compiler = GrammarCompiler(self._tokenizer, self._vocab_size, self._stop_token_ids)
            return self._compiler
