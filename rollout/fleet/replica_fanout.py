"""One RPC on every replica at once, through Ray Serve (Targeted GrpcCalls to each replica's server).

The gRPC front's control calls (reset the prefix cache, abort, pause, resume) and the fleet's sleep
mode (fleet_sleep.py) fan out with it; each replica's answer comes back, or why it failed, by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollout.fleet.replica_calls import GrpcCall, GrpcReply, Targeted
from rollout.fleet.replica_errors import error_text

SERVICE = "/rollout.v1.RolloutService/"
CONTROL_TIMEOUT_S = 600.0
Metadata = Sequence[tuple[str, str]]


def call_each(
    handle: Any, replicas: list[str], rpc: str, request: Any, metadata: Metadata = ()
) -> tuple[dict[str, GrpcReply], dict[str, tuple[str, str]]]:
    """Calls RolloutService's `rpc` on every replica at once; ({replica: reply}, {replica: (status
    name, why)}) where a replica that died or left counts as UNAVAILABLE."""
    call = GrpcCall(SERVICE + rpc, request.SerializeToString(), tuple(metadata))
    responses = {r: handle.grpc_unary.remote(Targeted(r, call)) for r in replicas}
    replies, failed = {}, {}
    for replica, response in responses.items():
        try:
            reply = response.result(timeout_s=CONTROL_TIMEOUT_S)
        except Exception as exc:  # the replica died or is gone
            failed[replica] = ("UNAVAILABLE", error_text(exc))
            continue
        if reply.code == "OK":
            replies[replica] = reply
        else:
            failed[replica] = (reply.code, reply.details)
    return replies, failed


def describe_failures(failed: dict[str, tuple[str, str]]) -> str:
    return "; ".join(f"replica {r}: {code}: {why}" for r, (code, why) in failed.items())
