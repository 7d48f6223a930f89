"""Where one request should go: session first, then cached prefix, then load (a pure function).

Ranks, best first, as Ray Serve's request router takes them (`choose_replicas`): Serve sends to the
least-queued replica of the first rank with room, so a full preferred replica falls through to the
next rank. A session key pins its episode to the replica that served it; a request whose prefix a
replica holds goes there while that replica's load stays within `imbalanced_threshold` requests of
the least loaded (past it, load wins, as in Ray Serve LLM's PrefixCacheAffinityRouter); anything
else goes to the least loaded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoutingInputs:
    candidates: list[str]  # replica ids that can take the request
    loads: dict[str, int]  # requests in flight per replica (missing: unknown, taken as 0)
    matched_chunks: dict[str, int]  # leading prompt chunks each replica holds (prefix_index.py)
    session_replica: str | None = None  # the replica this request's session is pinned to


def rank_replicas(inputs: RoutingInputs, imbalanced_threshold: int) -> list[list[str]]:
    """The candidates in ranks, best first; every candidate appears once."""
    candidates = inputs.candidates
    if not candidates:
        return []
    load = {r: inputs.loads.get(r, 0) for r in candidates}
    by_load = sorted(candidates, key=lambda r: load[r])
    if inputs.session_replica in load:
        return _first(inputs.session_replica, by_load)
    best = max(inputs.matched_chunks.get(r, 0) for r in candidates)
    if best == 0:
        return [by_load]
    holders = [r for r in by_load if inputs.matched_chunks.get(r, 0) == best]
    if load[holders[0]] - load[by_load[0]] > imbalanced_threshold:
        return [by_load]
    rest = [r for r in by_load if r not in holders]
    return [holders, rest] if rest else [holders]


def _first(replica: str, by_load: list[str]) -> list[list[str]]:
    rest = [r for r in by_load if r != replica]
    return [[replica], rest] if rest else [[replica]]
