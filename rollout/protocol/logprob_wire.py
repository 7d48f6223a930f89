"""Logprob values on the wire: the float, and vLLM's rank beside it (decoded_token stays off the wire: clients
have no tokenizer). A server that predates ranks sends none; the reader then gives Logprobs with rank None."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rollout.logprobs import Logprob
from rollout.protocol.generated import rollout_pb2 as pb


def ranks_to_proto(values: Sequence[float] | None) -> list[int]:
    """Each value's rank, or none at all when any is unknown (a plain float, a rank of None)."""
    ranks = [getattr(value, "rank", None) for value in values or []]
    return [] if None in ranks else ranks


def logprobs_from_proto(values: Sequence[float], ranks: Sequence[int]) -> list[Logprob]:
    known = len(ranks) == len(values)
    return [Logprob(v, ranks[i] if known else None) for i, v in enumerate(values)]


def entry_to_proto(entry: dict[int, float] | None) -> pb.TopLogprobs:
    message = pb.TopLogprobs()
    for token, value in (entry or {}).items():
        item = message.entries.add(token_id=token, logprob=value)
        if getattr(value, "rank", None) is not None:
            item.rank = value.rank
    return message


def entry_from_proto(message: pb.TopLogprobs) -> dict[int, Logprob]:
    return {e.token_id: Logprob(e.logprob, e.rank if e.HasField("rank") else None) for e in message.entries}


def entries_from_proto(messages: Iterable[pb.TopLogprobs]) -> list[dict[int, Logprob]]:
    return [entry_from_proto(m) for m in messages]
