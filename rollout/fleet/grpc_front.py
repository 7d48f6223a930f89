"""FleetFront: the fleet's one gRPC address, serving RolloutService and WeightSyncService as one server.

Ray Serve's gRPC proxy routes each call to one deployment replica by method and cannot fan a call
out, so the front is our own gRPC server, started inside the FleetIngress replica: it shares that
process's DeploymentHandle, hence its CacheAffinityRouter (one prefix index and session map for
OpenAI and gRPC calls), and costs no extra process. Generation, scoring and server info go to one
replica, routed and failed over (front_forward.py), where the replica's own servicer answers them;
reset/abort/pause/resume fan out; sleep is fleet-wide (fleet_sleep.py); weight pushes take the
fleet-atomic path (front_weights.py). Every answer carries the fleet's boot id (its ledger's).
"""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import ray
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rollout.fleet.fleet_metrics import render_fleet_metrics
from rollout.fleet.fleet_sleep import FleetSleepError, fleet_state, sleep_fleet, sleep_states, wake_fleet
from rollout.fleet.front_forward import (
    LOST,
    forward_generate,
    forward_unary,
    grpc_call,
    prompt_prefix,
    seeded,
)
from rollout.fleet.front_weights import FrontWeights
from rollout.fleet.replica_calls import Targeted
from rollout.fleet.replica_fanout import SERVICE, call_each, describe_failures
from rollout.fleet.replica_names import live_replicas
from rollout.fleet.weight_ledger import NAMESPACE
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.server.app import HEALTH_SERVICE_NAME, BearerTokenInterceptor
from rollout.server.boot_id import BootIdInterceptor
from rollout.server.reflection import add_reflection

ROLLOUT_SERVICE = pb.DESCRIPTOR.services_by_name["RolloutService"].full_name
WEIGHT_SERVICE = weights_pb2.DESCRIPTOR.services_by_name["WeightSyncService"].full_name
MAX_MESSAGE_BYTES = 2**31 - 1


@dataclass(frozen=True)
class FrontSpec:
    port: int
    host: str
    app_name: str
    ledger: str  # the fleet's ledger actor (weight_ledger.py)
    token: str | None = None
    threads: int = 512  # open calls at once (a Generate holds one until it ends)


class FleetFront:
    """What the servicers reach the fleet through: the replicas' handle, their ids, the ledger."""

    def __init__(self, spec: FrontSpec, handle: Any) -> None:
        self.spec, self.handle = spec, handle
        self.ledger = ray.get_actor(spec.ledger, namespace=NAMESPACE)
        self.fleet_id: str = ray.get(self.ledger.id.remote())
        self.server = _build_server(self)
        self.server.start()

    @property
    def boot_id(self) -> str:
        """The boot id the front answers with (group_fanout.py names its bases by it)."""
        return self.fleet_id

    def replicas(self) -> list[str]:
        return live_replicas(self.spec.app_name)

    def stop(self) -> None:
        self.server.stop(grace=1.0)


class FrontRollout(pb_grpc.RolloutServiceServicer):
    def __init__(self, front: FleetFront) -> None:
        self.front = front

    def Generate(self, request, context):
        request = seeded(request)
        call = grpc_call(SERVICE + "Generate", request, context, prompt_prefix(request.prompts))
        yield from forward_generate(self.front, call, context)

    def GenerateBatch(self, request, context):
        request = seeded(request)
        call = grpc_call(SERVICE + "GenerateBatch", request, context, prompt_prefix(request.prompts))
        return pb.GenerateBatchResponse.FromString(forward_unary(self.front, call, context))

    def Score(self, request, context):
        first = request.sequences[0].ids if request.sequences else []
        call = grpc_call(SERVICE + "Score", request, context, "".join(f"{t}," for t in first))
        return pb.ScoreResponse.FromString(forward_unary(self.front, call, context))

    def GetServerInfo(self, request, context):
        """One replica's description (its cache's blocks), under the fleet's boot id."""
        body = forward_unary(self.front, grpc_call(SERVICE + "GetServerInfo", request, context), context)
        info = pb.GetServerInfoResponse.FromString(body)
        info.boot_id = self.front.fleet_id
        if "weight_group_ranks" in info.DESCRIPTOR.fields_by_name:  # a client gives the front one group
            info.weight_group_ranks = len(self.front.replicas())  # rank per replica (group_fanout.py)
        return info

    def ResetPrefixCache(self, request, context):
        self._every("ResetPrefixCache", request, context)
        return pb.ResetPrefixCacheResponse()

    def Abort(self, request, context):
        replies = self._every("Abort", request, context)
        return pb.AbortResponse(found=any(pb.AbortResponse.FromString(r.body).found for r in replies))

    def Pause(self, request, context):
        self._every("Pause", request, context)
        return pb.PauseResponse()

    def Resume(self, request, context):
        self._every("Resume", request, context)
        return pb.ResumeResponse()

    def GetMetrics(self, request, context):
        stats = {}
        for replica in self.front.replicas():
            try:
                stats[replica] = self.front.handle.stats.remote(Targeted(replica)).result()
            except LOST:
                continue
        return pb.GetMetricsResponse(prometheus_text=render_fleet_metrics(stats))

    def Sleep(self, request, context):
        front, metadata = self.front, _metadata(context)
        freed = _sleeping(
            context,
            lambda: sleep_fleet(
                front.handle,
                front.replicas,
                front.ledger,
                request.level or 1,
                request.abort_running,
                metadata,
            ),
        )
        return pb.SleepResponse(bytes_freed=freed)

    def WakeUp(self, request, context):
        front, tags = self.front, list(request.tags) or None
        _sleeping(
            context, lambda: wake_fleet(front.handle, front.replicas, front.ledger, tags, _metadata(context))
        )
        return pb.WakeUpResponse()

    def IsSleeping(self, request, context):
        """Asleep when every replica is; which ones sleep when they differ: the fleet's /metrics."""
        front = self.front
        return fleet_state(
            _sleeping(context, lambda: sleep_states(front.handle, front.replicas(), _metadata(context)))
        )

    def _every(self, rpc: str, request: Any, context: grpc.ServicerContext) -> list[Any]:
        replies, failed = call_each(
            self.front.handle, self.front.replicas(), rpc, request, _metadata(context)
        )
        if failed:
            code = next(iter(failed.values()))[0]
            context.abort(grpc.StatusCode[code], f"{rpc} failed on the fleet: {describe_failures(failed)}")
        return list(replies.values())


def _sleeping(context: grpc.ServicerContext, work: Any) -> Any:
    try:
        return work()
    except FleetSleepError as err:
        context.abort(grpc.StatusCode[err.code], str(err))
    except ValueError as err:  # a bad tag
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))


def _metadata(context: grpc.ServicerContext) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in context.invocation_metadata() or () if k == "authorization")


def _build_server(front: FleetFront) -> grpc.Server:
    spec = front.spec
    interceptors = [
        BootIdInterceptor(front.fleet_id),
        *([BearerTokenInterceptor(spec.token)] if spec.token else []),
    ]
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0),
    ]
    pool = futures.ThreadPoolExecutor(spec.threads, "fleet-front")
    server = grpc.server(pool, interceptors=interceptors, options=options)
    pb_grpc.add_RolloutServiceServicer_to_server(FrontRollout(front), server)
    weights_pb2_grpc.add_WeightSyncServiceServicer_to_server(FrontWeights(front), server)
    checks = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    for name in ("", ROLLOUT_SERVICE, WEIGHT_SERVICE):
        checks.set(name, health_pb2.HealthCheckResponse.SERVING)
    add_reflection(server, [ROLLOUT_SERVICE, WEIGHT_SERVICE, HEALTH_SERVICE_NAME])
    if server.add_insecure_port(f"{spec.host}:{spec.port}") == 0:
        raise OSError(f"the fleet's gRPC front could not bind {spec.host}:{spec.port}")
    return server
