"""Logprob: vLLM's per-token logprob object (`.logprob`, `.rank`, `.decoded_token`) that is also the float it
holds, so `top_logprobs[i][token].logprob` (vLLM's idiom) and plain float arithmetic on the same value both work.
SampleLogprobs: vLLM's `CompletionOutput.logprobs` shape (per token a `{token_id: Logprob}` dict) as a view over
the sample's flat values, as vLLM's own FlatLogprobs is: one dict built per read, nothing stored twice.

`rank` is the token's 1-based rank in the vocabulary under the values the logprobs mode names (vLLM's: the
number of tokens whose value is >= the token's; the top-k entries are ranked 1..k in order); `decoded_token`
the token's own text, filled by the offline `LLM` when a tokenizer detokenizes (None otherwise, as vLLM with
`detokenize=False`). Equality and hashing are the float's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload


class Logprob(float):
    __slots__ = ("decoded_token", "rank")

    def __new__(cls, logprob: float, rank: int | None = None, decoded_token: str | None = None) -> Logprob:
        self = super().__new__(cls, logprob)
        self.rank = rank
        self.decoded_token = decoded_token
        return self

    @property
    def logprob(self) -> float:
        return float(self)

    def with_decoded_token(self, decoded_token: str | None) -> Logprob:
        return Logprob(float(self), self.rank, decoded_token)

    def __repr__(self) -> str:
        return f"Logprob(logprob={float(self)!r}, rank={self.rank!r}, decoded_token={self.decoded_token!r})"

    def __reduce__(self) -> tuple:
        return (Logprob, (float(self), self.rank, self.decoded_token))


def as_logprob(value: float) -> Logprob:
    """`value` as a Logprob (a plain float from a server that predates ranks gets rank None)."""
    return value if isinstance(value, Logprob) else Logprob(value)


class SampleLogprobs(Sequence[dict[int, Logprob]]):
    """Per output token i: `{sampled token: Logprob, then the top k}` (vLLM's order: the sampled token first,
    once, even when it is among the top k), read from the sample's `token_logprobs` and `top_logprobs`."""

    __slots__ = ("_token_ids", "_values", "_tops")

    def __init__(
        self, token_ids: list[int], values: list[float], tops: list[dict[int, float]] | None
    ) -> None:
        if len(values) != len(token_ids) or (tops is not None and len(tops) != len(token_ids)):
            raise ValueError(
                f"logprobs: {len(values)} values and {None if tops is None else len(tops)} top-k entries "
                f"for {len(token_ids)} tokens"
            )
        self._token_ids, self._values, self._tops = token_ids, values, tops

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, index: int) -> dict[int, Logprob]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[int, Logprob]]: ...
    def __getitem__(self, index: int | slice) -> dict[int, Logprob] | list[dict[int, Logprob]]:
        if isinstance(index, slice):
            return [self._entry(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"logprobs index {index} out of range for {len(self)} tokens")
        return self._entry(index)

    def _entry(self, i: int) -> dict[int, Logprob]:
        """As vLLM builds it: a top-k entry for the sampled token replaces its value, not its place (first)."""
        entry = {self._token_ids[i]: as_logprob(self._values[i])}
        for token, value in (self._tops[i] if self._tops is not None else {}).items():
            entry[token] = as_logprob(value)
        return entry

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleLogprobs | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))
