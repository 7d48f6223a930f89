"""The sampler's rows, rebuilt from finished samples: one per sampled token, as the sampler saw that step.

A row is that step's SampleRow: the settings, the tokens seen so far (prompt + the output before the
token) and, with structured outputs, the grammar's allowed tokens at that step, found by walking a
fresh matcher over the sampled tokens as the engine advanced the sample's own. Nothing here needs
the model: the replay recomputes the logits, these rows say what the sampler did with them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rollout.engine.sample.sampler import SampleRow
from rollout.sampling_params import SamplingParams
from rollout.structured.grammar_state import GrammarState


class SeenPrefix(Sequence[int]):
    """tokens[:length] without a copy per row (a sample of T tokens has T rows over one list)."""

    __slots__ = ("_tokens", "_length")

    def __init__(self, tokens: list[int], length: int) -> None:
        self._tokens = tokens
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        span = range(self._length)[index]  # bounds and negative indices as a list of that length
        if isinstance(span, int):
            return self._tokens[span]
        return [self._tokens[i] for i in span] if span.step != 1 else self._tokens[span.start : span.stop]


class ReplayedMask:
    """One step's allowed tokens as the grammar gave them (xgrammar's bitmask words), written back on demand."""

    __slots__ = ("_words",)

    def __init__(self, words: torch.Tensor) -> None:
        self._words = words

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        bitmask[row] = self._words


def sample_rows(
    prompt: Sequence[int],
    completion: Sequence[int],
    params: SamplingParams,
    grammar: Any | None,
    vocab: int,
) -> list[SampleRow]:
    """One row per completion token. `grammar`: the compiled grammar of params.structured_outputs (None
    without); ValueError naming the position when the completion does not follow it."""
    tokens = [*prompt, *completion]
    masks = grammar_steps(grammar, completion, vocab) if grammar is not None else [None] * len(completion)
    return [
        SampleRow(params, 0, SeenPrefix(tokens, len(prompt) + t), len(prompt), masks[t])
        for t in range(len(completion))
    ]


def grammar_steps(compiled: Any, completion: Sequence[int], vocab: int) -> list[ReplayedMask]:
    """The allowed tokens before each completion token, from a matcher advanced token by token."""
    state = GrammarState(compiled)
    words = torch.zeros((len(completion), (vocab + 31) // 32), dtype=torch.int32)  # the sampler's layout
    for t, token in enumerate(completion):
        state.fill_bitmask(words, t)
        if not state.accept(token):
            raise ValueError(
                f"structured_outputs: completion token {t} (id {token}) does not follow the grammar; "
                "the sample was not drawn with these settings"
            )
    return [ReplayedMask(words[t]) for t in range(len(completion))]
