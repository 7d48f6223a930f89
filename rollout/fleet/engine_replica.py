"""EngineReplica: one rollout server inside a Ray Serve replica (the deployment's class body).

The replica loads the engine as `rollout serve` does (same flags), serves gRPC on its own address
(the fleet hands those to a `RolloutClient`) and the OpenAI API on loopback, which the fleet's
ingress reaches through Ray Serve calls (`openai`, `openai_stream`) routed by CacheAffinityRouter.
A replica that replaces a dead one replays the fleet's committed updates first (weight_ledger.py).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import ray
from ray import serve

from rollout.fleet.fleet_payload import FleetPayload, read_disk
from rollout.fleet.group_member import GroupMember
from rollout.fleet.replica_calls import ForwardedReply, GrpcCall, GrpcReply, OpenAICall, Targeted
from rollout.fleet.replica_grpc import ReplicaGrpc
from rollout.fleet.replica_sleep import sleep_like_fleet
from rollout.fleet.weight_ledger import ledger_updates
from rollout.fleet.weight_stage import StagedUpdate, WeightStage


@dataclass(frozen=True)
class ReplicaSpec:
    serve_args: list[str] = field(default_factory=list)  # `rollout serve` flags: --model, engine options
    host: str = "127.0.0.1"  # where the replica's gRPC server binds
    token: str | None = None
    ledger: str | None = None  # the fleet's weight ledger actor (weight_ledger.py)
    torch_threads: int = 1


class EngineReplica:
    def __init__(self, spec: ReplicaSpec) -> None:
        import torch

        torch.set_num_threads(spec.torch_threads)
        self.server, self.openai_server = _start_servers(spec)
        self.loop = self.server.loop
        self.stage = WeightStage(self.loop)
        self.http = httpx.AsyncClient(base_url=self.openai_server.base_url, timeout=None)
        self.grpc = ReplicaGrpc(_loopback(self.server.address))
        self.replica_id = serve.get_replica_context().replica_id
        self.group_member = GroupMember(self.loop, self.stage, spec.ledger, self.replica_id.unique_id)
        if spec.ledger is not None:
            _catch_up(self.loop, spec.ledger)
            sleep_like_fleet(self.loop, spec.ledger)

    # ---- OpenAI requests (routed by CacheAffinityRouter) ------------------------------------------

    async def openai(self, call: OpenAICall) -> ForwardedReply:
        await self.stage.wait_open()
        body = call.body if call.method == "POST" else None
        reply = await self.http.request(call.method, call.path, json=body, headers=call.headers)
        return ForwardedReply(reply.status_code, reply.content, reply.headers.get("content-type", ""))

    async def openai_stream(self, call: OpenAICall) -> AsyncIterator[bytes | ForwardedReply]:
        """The reply's status first (a ForwardedReply with no body), then its bytes as they come."""
        await self.stage.wait_open()
        async with self.http.stream("POST", call.path, json=call.body, headers=call.headers) as reply:
            yield ForwardedReply(reply.status_code, b"", reply.headers.get("content-type", ""))
            async for chunk in reply.aiter_raw():
                yield chunk

    # ---- gRPC calls of the fleet's front (grpc_front.py): routed, or Targeted ----------------------

    async def grpc_unary(self, call: GrpcCall | Targeted) -> GrpcReply:
        if isinstance(call, Targeted):  # control calls (sleep, reset, abort) pass a held gate
            return await self.grpc.unary(call.payload)
        await self.stage.wait_open()
        return await self.grpc.unary(call)

    async def grpc_stream(self, call: GrpcCall) -> AsyncIterator[bytes | GrpcReply]:
        await self.stage.wait_open()
        async for item in self.grpc.stream(call):
            yield item

    # ---- one replica at a time (Targeted) --------------------------------------------------------

    def describe(self, _: Targeted) -> dict[str, Any]:
        return {
            "replica": self.replica_id.unique_id,
            "actor_name": self.replica_id.to_full_id_str(),
            "grpc_address": _reachable(self.server.address),
            "pid": os.getpid(),
            "weight_version": self.loop.engine.weight_version,
        }

    def stats(self, _: Targeted) -> dict[str, Any]:
        engine = self.loop.engine
        return self.loop.stats() | {
            "weight_version": engine.weight_version,
            "sleep_level": engine.memory.level,
        }

    def metrics_text(self, _: Targeted) -> str:
        return self.server.metrics.render()

    async def stage_weights(self, call: Targeted) -> dict[str, Any]:
        """Stages a FleetPayload; returns the disk files read (`fingerprint`), whether it `relies` on
        the held base and is `complete` (every weight written), which every replica must report alike."""
        update_id, payload, version = call.payload
        tensors, fingerprint = await _payload_tensors(payload)
        update = StagedUpdate(tensors, version, payload.lora, payload.base_version)
        view = await asyncio.to_thread(self.stage.stage, update_id, update)
        return view | {"fingerprint": fingerprint}

    async def hold(self, _: Targeted) -> None:  # on the replica's event loop, as the gate's waiters
        self.stage.hold()

    async def commit_weights(self, call: Targeted) -> int:
        update_id, in_flight = call.payload
        return await asyncio.to_thread(self.stage.commit, update_id, in_flight)

    def discard_weights(self, call: Targeted) -> None:
        self.stage.discard(call.payload)

    async def release(self, _: Targeted) -> None:
        self.stage.release()

    # ---- torch.distributed pushes: the trainer's group (group_member.py) ------------------------

    async def join_weight_group(self, call: Targeted) -> None:
        await asyncio.to_thread(self.group_member.join, call.payload)  # a GroupSpec

    async def stage_from_group(self, call: Targeted) -> dict[str, Any]:
        return await asyncio.to_thread(self.group_member.receive, call.payload)  # a GroupUpdate

    async def close_weight_group(self, _: Targeted) -> None:
        await asyncio.to_thread(self.group_member.close)

    # ---- Ray Serve hooks ---------------------------------------------------------------------------

    def record_routing_stats(self) -> dict[str, Any]:
        stats = self.loop.stats()
        return {
            "num_requests_unfinished": int(stats.get("num_requests_unfinished", 0)),
            "weight_version": self.loop.engine.weight_version,
        }

    def check_health(self) -> None:
        if not self.loop.accepting:
            raise RuntimeError("the engine loop stopped")

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            self.openai_server.stop(timeout=1.0)
            server.stop(grace=0.0)


def _start_servers(spec: ReplicaSpec) -> tuple[Any, Any]:
    """The gRPC server (free port on `spec.host`) and the OpenAI one (free loopback port)."""
    from rollout.commands.serve import _weight_sync, check_serve_args, compile_limits
    from rollout.commands.serve_flags import parse_serve_flags
    from rollout.engine_factory import load_engine
    from rollout.openai.server import OpenAIServer
    from rollout.server.app import RolloutServer
    from rollout.server.engine_loop import EngineLoop

    flags = [*spec.serve_args, "--host", spec.host, "--port", "0", "--openai-port", "0"]
    args = parse_serve_flags([*flags, *(["--token", spec.token] if spec.token else [])])
    model, config = check_serve_args(args)
    engine = load_engine(model, config, args.tokenizer)
    hooks, names = _weight_sync(args.weight_idle_timeout)
    loop = EngineLoop(engine, max_pending_requests=args.max_queue, grammar_limits=compile_limits(args))
    server = RolloutServer(
        loop,
        host=spec.host,
        port=0,
        token=spec.token,
        max_message_bytes=args.max_message_mb * 2**20,
        max_generate_calls=args.max_generate_calls,
        extra_servicers=hooks,
        extra_service_names=names,
    ).start()
    openai_server = OpenAIServer(
        server.loop,
        server.metrics,
        port=0,
        token=spec.token,
        tool_call_parser=args.tool_call_parser,
        max_open_requests=args.max_generate_calls,
        served_model_names=args.served_model_name,
    ).start()
    return server, openai_server


async def _payload_tensors(payload: FleetPayload) -> tuple[dict[str, Any], str | None]:
    if payload.path is not None:
        return await asyncio.to_thread(read_disk, payload)
    ref = payload.ref
    return (await ref if isinstance(ref, ray.ObjectRef) else ref), None


def _catch_up(loop: Any, ledger_name: str) -> None:
    """A replica started after fleet updates replays them in order before its first request (a
    disk directory changed since its commit refuses: the replica fails rather than serve other
    weights)."""
    for version, payload in ledger_updates(ledger_name):
        if payload.path is not None:
            tensors, _ = read_disk(payload)
        else:
            tensors = ray.get(payload.ref)
        loop.call(partial(_replay, StagedUpdate(tensors, version, payload.lora, payload.base_version)))


def _replay(update: StagedUpdate, engine: Any) -> int:
    return engine.update_weights(update.tensors, update.version, "wait", update.lora, update.base_version)


def _loopback(address: str) -> str:
    host, port = address.rsplit(":", 1)
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "[::]", "::") else address


def _reachable(address: str) -> str:
    host, port = address.rsplit(":", 1)
    if host in ("0.0.0.0", "[::]", "::"):
        host = ray.util.get_node_ip_address()
    return f"{host}:{port}"
