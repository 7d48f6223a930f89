"""Logprob: vLLM's per-token logprob object (`.logprob`, `.rank`, `.decoded_token`) that is also the float it
holds, so `top_logprobs[i][token].logprob` (vLLM's idiom) and plain float arithmetic on the same value both work.

`rank` is the token's 1-based rank in the vocabulary under the values the logprobs mode names (vLLM's: the
number of tokens whose value is >= the token's; the top-k entries are ranked 1..k in order); `decoded_token`
the token's own text, filled by the offline `LLM` when a tokenizer detokenizes (None otherwise, as vLLM with
`detokenize=False`). Equality and hashing are the float's.
"""

from __future__ import annotations


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
