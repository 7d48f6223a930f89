"""Prompt logprobs and Score results on the wire.

vLLM's prompt_logprobs start with None (the first prompt token has no logprob); the wire carries
the entries after it, and the reader puts the None back.
"""

from __future__ import annotations

from rollout.logprobs import Logprob
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.logprob_wire import entries_from_proto, entry_to_proto
from rollout.scoring import ScoreOutput


def prompt_logprobs_to_proto(entries: list[dict[int, float] | None] | None) -> list[pb.TopLogprobs]:
    return [_entry(e) for e in (entries or [None])[1:]]


def prompt_logprobs_from_proto(
    messages, asked: bool, prompt_token_ids: list[int]
) -> list[dict[int, float] | None] | None:
    """`asked`: the request set prompt_logprobs (then an empty list means a one-token prompt). Each entry
    opens with its prompt token, as vLLM's (a server that predates that order sent the top k first)."""
    if not asked:
        return None
    entries = entries_from_proto(messages)
    return [None, *(_prompt_token_first(e, t) for e, t in zip(entries, prompt_token_ids[1:], strict=True))]


def _prompt_token_first(entry: dict[int, Logprob], token: int) -> dict[int, Logprob]:
    return {token: entry[token], **entry} if token in entry else entry


def score_result_to_proto(result: ScoreOutput) -> pb.ScoreResult:
    return pb.ScoreResult(
        request_id=result.request_id,
        token_ids=result.token_ids,
        logprobs=result.logprobs,
        top_logprobs=[_entry(e) for e in result.top_logprobs or []],
        weight_version=result.weight_version,
    )


def score_result_from_proto(message: pb.ScoreResult, top_logprobs: bool) -> ScoreOutput:
    return ScoreOutput(
        request_id=message.request_id,
        token_ids=list(message.token_ids),
        logprobs=list(message.logprobs),
        top_logprobs=entries_from_proto(message.top_logprobs) if top_logprobs else None,
        weight_version=message.weight_version,
    )


def _entry(entry: dict[int, float] | None) -> pb.TopLogprobs:
    return entry_to_proto(entry)
