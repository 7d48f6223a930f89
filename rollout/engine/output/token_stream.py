"""Token streaming: each step's new tokens of the requests added with `stream=True`.

A server that streams text (the OpenAI front end) needs tokens as they are sampled, but its engine
loop must not detokenize: the engine only records what each step sampled for those requests, and
the loop hands the records to the request's callers, who decode them on their own threads. A token
that finishes its sample is not recorded: it travels with the finished sample, as for any request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rollout.engine.requests.request import Sequence


@dataclass(frozen=True, slots=True)
class TokenDelta:
    """One sampled token of one sample; `position` is its output token index (0 = the first)."""

    request_id: str
    sample_index: int
    position: int
    token_id: int
    logprob: float | None = None  # with SamplingParams.logprobs set
    top_logprobs: dict[int, float] | None = None  # with SamplingParams.logprobs > 0


def latest_token(seq: Sequence) -> TokenDelta:
    """The token `seq` just sampled, with its logprob and alternatives when the request asked for them."""
    params = seq.request.params
    want = params.logprobs is not None
    return TokenDelta(
        seq.request.request_id,
        seq.sample_index,
        seq.num_output_tokens - 1,
        seq.token_ids[-1],
        seq.logprobs[-1] if want else None,
        seq.top_logprobs[-1] if want and params.logprobs else None,
    )


class StreamedTokens:
    """The tokens requests added with `stream=True` sampled since the last `take`, in sampling order; a
    sample's finishing token is left out (it comes with the finished sample)."""

    def __init__(self) -> None:
        self._tokens: list[TokenDelta] = []

    def add(self, seq: Sequence) -> None:
        self._tokens.append(latest_token(seq))

    def take(self) -> list[TokenDelta]:
        tokens, self._tokens = self._tokens, []
        return tokens
