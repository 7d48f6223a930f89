"""The sampler's rows, rebuilt from finished samples: one per sampled token, as the sampler saw that step.

A row is that step's SampleRow: the settings, the tokens seen so far (prompt + the output before the
token) and, with structured outputs, the grammar's allowed tokens at that step, found by walking a
fresh matcher over the sampled tokens as the engine advanced the sample's own. Nothing here needs
the model: the replay recomputes the logits, these rows say what the sampler did with them.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from typing import Any

import torch

from rollout.engine.sample.sampler import SampleRow
from rollout.engine.sample.token_counts import TokenCounts, needs_token_counts
from rollout.sampling_params import SamplingParams
from rollout.structured_outputs.grammar_state import GrammarState


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


class CountsAt:
    """A sample's TokenCounts as they stood at one row (copies of the arrays the penalties read), counted
    by the engine's own TokenCounts walked once over the sample: T rows cost T copies, not T recounts.
    `update` has nothing to add (the sampler brings a sequence's live counts up to date; these are)."""

    __slots__ = ("seen_ids", "output_ids", "output_counts")

    def __init__(self, counts: TokenCounts) -> None:
        self.seen_ids = array.array("q", counts.seen_ids)
        self.output_ids = array.array("q", counts.output_ids)
        self.output_counts = array.array("q", counts.output_counts)

    def update(self, tokens: Sequence[int], num_prompt_tokens: int) -> CountsAt:
        return self


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
    counts = counts_steps(prompt, completion) if needs_token_counts(params) else [None] * len(completion)
    return [
        SampleRow(params, 0, SeenPrefix(tokens, len(prompt) + t), len(prompt), masks[t], counts[t])
        for t in range(len(completion))
    ]


def counts_steps(prompt: Sequence[int], completion: Sequence[int]) -> list[CountsAt]:
    """The penalties' counts before each completion token, as the engine's sequence kept them."""
    seen, counts, steps = list(prompt), TokenCounts(), []
    for token in completion:
        steps.append(CountsAt(counts.update(seen, len(prompt))))
        seen.append(token)
    return steps


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
