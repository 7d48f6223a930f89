"""GrammarState: one sample's position in its grammar, advanced with each sampled token, forked with the n samples."""

from __future__ import annotations

from typing import Any

import torch

from rollout.structured_outputs.grammar_compiler import import_xgrammar


class GrammarState:
    __slots__ = ("_matcher",)

    def __init__(self, compiled: Any = None, matcher: Any = None) -> None:
        self._matcher = matcher if matcher is not None else import_xgrammar().GrammarMatcher(compiled)

    def fork(self) -> GrammarState:
        return GrammarState(matcher=self._matcher.fork())

    def accept(self, token_id: int) -> bool:
        """Advances past a sampled token. False only when the mask allowed no token at all (the grammar
        needs text no token of the vocabulary writes), so the token was drawn from nothing."""
        return self._matcher.accept_token(token_id)

    def accept_all(self, token_ids: list[int]) -> None:
        """A resumed sample's tokens; ValueError if they do not follow the grammar."""
        for token_id in token_ids:
            if not self._matcher.accept_token(token_id):
                raise ValueError(
                    f"structured_outputs: the resumed tokens do not follow the grammar at {token_id}"
                )

    @property
    def finished(self) -> bool:
        """The grammar accepted a stop token: nothing may follow."""
        return self._matcher.is_terminated()

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Writes the allowed tokens of the next step into bitmask[row] (int32 words, bit j of word w = token 32w + j)."""
        self._matcher.fill_next_token_bitmask(bitmask, row)
