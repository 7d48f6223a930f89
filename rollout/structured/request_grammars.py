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
        _check_no_conflicting_bans(params)
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


def _check_no_conflicting_bans(params: SamplingParams) -> None:
    """Bans that may hide every token the grammar allows (EOS when the grammar can only end) would leave
    nothing to sample, so they are refused with a grammar rather than failing mid-sample."""
    conflicting = [
        name
        for name, value in (
            ("min_tokens", params.min_tokens),
            ("bad_words", params.bad_words or params.bad_words_token_ids),
            ("allowed_token_ids", params.allowed_token_ids is not None),
        )
        if value
    ]
    if conflicting:
        raise ValueError(
            f"structured_outputs: not supported together with {conflicting[0]}, whose bans could leave no "
            "token the grammar allows"
        )
