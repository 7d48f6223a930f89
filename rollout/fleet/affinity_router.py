"""CacheAffinityRouter: Ray Serve's request router for the engine replicas (routing_policy.py decides).

Runs inside every process holding a handle to the replicas (the ingress, a driver pushing weights).
It keeps where each prompt prefix went (prefix_index.py) and which replica each session is pinned
to; a replica that dies is forgotten, so its sessions and prefixes move to the live ones. `Targeted`
calls go to their replica or nowhere. Ray Serve LLM's PrefixCacheAffinityRouter does the prefix part
from a detached tree actor (one more process per deployment) and has no session key; this one keeps
its index in the router itself.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from rollout.fleet.prefix_index import PrefixIndex
from rollout.fleet.replica_calls import GrpcCall, OpenAICall, Targeted
from rollout.fleet.routing_policy import RoutingInputs, rank_replicas

MAX_SESSIONS = 100_000


class ReplicaGoneError(RuntimeError):
    """A call addressed to one replica that is not (or no longer) live."""


class CacheAffinityRouter(RequestRouter):
    def initialize_state(
        self, imbalanced_threshold: int = 8, chunk_chars: int = 16, round_robin: bool = False, **_: Any
    ) -> None:
        """`round_robin`: ignore sessions, prefixes and load (the benchmark's baseline)."""
        self.imbalanced_threshold = imbalanced_threshold
        self.round_robin = round_robin
        self.index = PrefixIndex(chunk_chars)
        self.sessions: OrderedDict[str, str] = OrderedDict()
        self._turn = 0

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        arg = _first_arg(pending_request)
        if pending_request is not None:  # no locality tiers here: back off between empty rounds
            pending_request.routing_context.should_backoff = True
        if isinstance(arg, Targeted):
            if arg.replica in by_id:
                return [[by_id[arg.replica]]]
            if not pending_request.future.done():  # the call fails at once, naming the replica
                pending_request.future.set_exception(ReplicaGoneError(f"replica {arg.replica} is not live"))
            return [candidate_replicas[:1]]  # Serve's loop sees the request done and stops routing it
        if self.round_robin:
            self._turn += 1
            ordered = sorted(by_id)
            return [[by_id[ordered[self._turn % len(ordered)]]]] if ordered else []
        ranks = rank_replicas(self._inputs(arg, by_id), self.imbalanced_threshold)
        return [[by_id[r] for r in rank] for rank in ranks]

    def _inputs(self, call: Any, by_id: dict[str, RunningReplica]) -> RoutingInputs:
        loads = {}
        for name, replica in by_id.items():
            queued = self._replica_queue_len_cache.get(replica.replica_id)
            loads[name] = (
                queued if queued is not None else replica.routing_stats.get("num_requests_unfinished", 0)
            )
        if not isinstance(call, (OpenAICall, GrpcCall)):
            return RoutingInputs(list(by_id), loads, {})
        matched = self.index.match(self.index.keys(call.prefix_text()), by_id)
        session = self.sessions.get(call.session) if call.session else None
        return RoutingInputs(list(by_id), loads, matched, session)

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        call = _first_arg(pending_request)
        if not isinstance(call, (OpenAICall, GrpcCall)) or self.round_robin:
            return
        self.index.insert(self.index.keys(call.prefix_text()), replica_id.unique_id)
        if call.session:
            self.sessions[call.session] = replica_id.unique_id
            self.sessions.move_to_end(call.session)
            if len(self.sessions) > MAX_SESSIONS:
                self.sessions.popitem(last=False)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._forget(replica_id.unique_id)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        before = {r.unique_id for r in self._replica_id_set}
        super().update_replicas(replicas)
        for gone in before - {r.unique_id for r in self._replica_id_set}:
            self._forget(gone)

    def _forget(self, replica: str) -> None:
        self.index.remove(replica)
        for session in [s for s, r in self.sessions.items() if r == replica]:
            del self.sessions[session]


def _first_arg(pending_request: PendingRequest | None) -> Any:
    if pending_request is None or not pending_request.args:
        return None
    return pending_request.args[0]
