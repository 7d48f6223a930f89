"""One `RolloutClient.score` call: the sequences dealt to the servers by load, one Score RPC per server.

Retried on UNAVAILABLE like a generate stream; request ids "<prefix>@<address>-<index>" make a retry
attach to the running sequences instead of scoring them twice.
"""

from __future__ import annotations

import grpc

from rollout.client.generate_call import Servers, attempts, remaining
from rollout.client.load_balance import prompt_cost
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.score_wire import score_result_from_proto
from rollout.scoring import ScoreOutput


def score_call(
    servers: Servers,
    sequences: list[list[int]],
    top_logprobs: int | None,
    prefix: str,
    deadline: float | None,
) -> list[ScoreOutput]:
    costs = [prompt_cost(len(seq), 1, 1) for seq in sequences]
    results: dict[int, ScoreOutput] = {}
    for address, indices in servers.balancer.assign(costs).items():
        try:
            shard = _score_shard(
                servers, address, [sequences[i] for i in indices], top_logprobs, prefix, deadline
            )
        finally:
            servers.balancer.release(address, sum(costs[i] for i in indices))
        results.update(zip(indices, shard, strict=True))
    return [results[i] for i in range(len(sequences))]


def _score_shard(
    servers: Servers,
    address: str,
    sequences: list[list[int]],
    top_logprobs: int | None,
    prefix: str,
    deadline: float | None,
) -> list[ScoreOutput]:
    request = pb.ScoreRequest(
        request_id=f"{prefix}@{address}", sequences=[pb.TokenIds(ids=seq) for seq in sequences]
    )
    if top_logprobs is not None:
        request.top_logprobs = top_logprobs
    for attempt in attempts(servers.max_retries, deadline):
        try:
            response = servers.stubs[address].Score(
                request, timeout=remaining(deadline), metadata=servers.metadata
            )
            break
        except grpc.RpcError as exc:
            if not attempt.retries(exc) or attempt.last:
                raise
    return [score_result_from_proto(r, bool(top_logprobs)) for r in response.results]
