"""A sequence's token counts for the penalties, kept from step to step: each step counts only the tokens
appended since the last, instead of the whole prompt + output again (processor_batch.py reads them).

A sequence's token list only grows, so how far it was counted says what is new; a list that is another
object, shorter than counted, or split at another prompt length is counted again from scratch.
"""

from __future__ import annotations

import array
from collections import Counter

from rollout.sampling_params import SamplingParams


def needs_token_counts(params: SamplingParams) -> bool:
    """The repetition penalty (prompt + output) or the frequency or presence penalty (output)."""
    return params.repetition_penalty != 1.0 or bool(params.frequency_penalty or params.presence_penalty)


class TokenCounts:
    """The distinct ids of prompt + output, and each distinct output id with its count, as int64 arrays
    in first-seen order (copied into a step's flat indices as whole arrays)."""

    __slots__ = (
        "_tokens",
        "_counted",
        "_num_prompt",
        "_seen",
        "seen_ids",
        "_output_at",
        "output_ids",
        "output_counts",
    )

    def __init__(self) -> None:
        self._start(None, 0)

    def _start(self, tokens: list[int] | None, num_prompt_tokens: int) -> None:
        self._tokens = tokens  # the list counted (the sequence's own, never copied)
        self._counted = 0  # tokens[:_counted] are counted
        self._num_prompt = num_prompt_tokens
        self._seen: set[int] = set()
        self.seen_ids = array.array("q")  # distinct ids of prompt + output
        self._output_at: dict[int, int] = {}  # output id -> its index in output_ids / output_counts
        self.output_ids = array.array("q")  # distinct output ids
        self.output_counts = array.array("q")  # how often each occurs in the output

    def update(self, tokens: list[int], num_prompt_tokens: int) -> TokenCounts:
        """Counts `tokens` (prompt + output, tokens[num_prompt_tokens:] the output) up to its end."""
        if tokens is not self._tokens or len(tokens) < self._counted or num_prompt_tokens != self._num_prompt:
            self._start(tokens, num_prompt_tokens)
        if len(tokens) > self._counted:
            self._count_seen(tokens[self._counted :])
            self._count_output(tokens[max(self._counted, num_prompt_tokens) :])
            self._counted = len(tokens)
        return self

    def _count_seen(self, new: list[int]) -> None:
        seen = self._seen
        fresh = (
            [token for token in dict.fromkeys(new) if token not in seen] if seen else list(dict.fromkeys(new))
        )
        seen.update(fresh)
        self.seen_ids.extend(fresh)

    def _count_output(self, new: list[int]) -> None:
        at, ids, counts = self._output_at, self.output_ids, self.output_counts
        if not at:  # the first output tokens (a resumed partial's, say): counted in C
            occurrences = Counter(new)  # insertion-ordered: first seen first
            at.update(zip(occurrences, range(len(occurrences)), strict=True))
            ids.extend(occurrences.keys())
            counts.extend(occurrences.values())
            return
        for token in new:  # a step's one new token
            i = at.get(token)
            if i is None:
                at[token] = len(ids)
                ids.append(token)
                counts.append(1)
            else:
                counts[i] += 1
