"""FleetIngress: the fleet's one OpenAI-compatible endpoint (a FastAPI app on Ray Serve's HTTP proxy).

Each generate request becomes an `OpenAICall` that Ray Serve routes to an engine replica
(CacheAffinityRouter: session, cached prefix, load). A request without a `seed` gets one here, so
that when its replica dies before answering, the same call on another replica samples exactly the
same tokens (the engine's seeded sampling does not depend on the batch): nothing is lost, and the
caller sees one reply. A stream whose replica dies after its first byte is replayed on another and
spliced (stream_failover.py): the caller's stream goes on where it was, exactly, or ends with an
error event when the replay is not the same sample. /metrics is the fleet's
(fleet_metrics.py), /v1/models any replica's; /sleep, /wake_up and /is_sleeping the fleet's
(ingress_sleep.py). With a FrontSpec, the replica also serves the fleet's gRPC address (grpc_front.py).
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations as types.
import json
import random
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import ReplicaUnavailableError

from rollout.fleet.fleet_metrics import render_fleet_metrics
from rollout.fleet.grpc_front import FleetFront, FrontSpec
from rollout.fleet.ingress_sleep import FleetSleepRoutes
from rollout.fleet.replica_calls import (
    FORWARDED_HEADERS,
    SESSION_HEADER,
    ForwardedReply,
    OpenAICall,
    Targeted,
)
from rollout.fleet.replica_names import live_replicas
from rollout.fleet.stream_failover import SpliceMismatchError, StreamLog, StreamSplice

MAX_ATTEMPTS = 3
# The replica died or became unreachable with the call (ActorDiedError, ActorUnavailableError...).
LOST = (RayActorError, ReplicaUnavailableError)


def ingress_deployment(
    app_name: str, num_cpus: float, token: str | None = None, ledger: str = "", front: FrontSpec | None = None
) -> Any:
    """The ingress deployment class for the application `app_name`; with `token`, /metrics and the
    sleep routes ask for it as each replica asks for it on the OpenAI routes (the ingress forwards
    the header). `ledger`: the fleet's ledger actor; `front`: where to serve the fleet's gRPC."""
    app = FastAPI()

    @serve.deployment(ray_actor_options={"num_cpus": num_cpus}, max_ongoing_requests=10_000)
    @serve.ingress(app)
    class FleetIngress:
        def __init__(self, engine: Any) -> None:
            self.engine = engine
            self.sleep = FleetSleepRoutes(engine, app_name, ledger, token)
            self.front = FleetFront(front, engine) if front is not None else None

        def __del__(self) -> None:
            if getattr(self, "front", None) is not None:
                self.front.stop()

        @app.post("/sleep")
        async def sleep_route(
            self, request: Request, level: int = 1, abort_running: bool = False
        ) -> Response:
            return await self.sleep.sleep(request, level, abort_running)

        @app.post("/wake_up")
        async def wake_up_route(self, request: Request) -> Response:
            return await self.sleep.wake_up(request, request.query_params.getlist("tags") or None)

        @app.get("/is_sleeping")
        async def is_sleeping_route(self, request: Request) -> Response:
            return await self.sleep.is_sleeping(request)

        @app.post("/v1/chat/completions")
        async def chat(self, request: Request) -> Response:
            return await self.forward("/chat/completions", request)

        @app.post("/v1/completions")
        async def completions(self, request: Request) -> Response:
            return await self.forward("/completions", request)

        @app.get("/v1/models")
        async def models(self, request: Request) -> Response:
            reply = await self.engine.openai.remote(OpenAICall("/models", {}, _headers(request), "GET"))
            return Response(reply.body, reply.status, media_type=reply.media_type)

        @app.get("/health")
        async def health(self) -> Response:
            return Response(status_code=200)

        @app.get("/metrics")
        async def metrics(self, request: Request) -> Response:
            if token is not None and request.headers.get("authorization") != f"Bearer {token}":
                return JSONResponse(_error("a bearer token is required", 401), status_code=401)
            stats = {}
            for replica in live_replicas(app_name):
                try:
                    stats[replica] = await self.engine.stats.remote(Targeted(replica))
                except LOST:
                    continue
            return PlainTextResponse(render_fleet_metrics(stats))

        async def forward(self, path: str, request: Request) -> Response:
            try:
                body = await request.json()
            except json.JSONDecodeError as exc:
                return JSONResponse(_error(f"the body is not JSON: {exc}"), status_code=400)
            if not isinstance(body, dict):
                return JSONResponse(_error("the body must be a JSON object"), status_code=400)
            if body.get("seed") is None:
                body["seed"] = random.getrandbits(31)  # a retry elsewhere samples the same tokens
            call = OpenAICall(path, body, _headers(request))
            if call.stream:
                return await self._stream(call)
            for attempt in range(MAX_ATTEMPTS):
                try:
                    reply = await self.engine.openai.remote(call)
                    return Response(reply.body, reply.status, media_type=reply.media_type)
                except LOST:
                    if attempt == MAX_ATTEMPTS - 1:
                        raise
            raise AssertionError("unreachable")

        async def _stream(self, call: OpenAICall) -> Response:
            for attempt in range(MAX_ATTEMPTS):
                chunks = self.engine.options(stream=True).openai_stream.remote(call)
                try:
                    head = await chunks.__anext__()
                except LOST:
                    if attempt == MAX_ATTEMPTS - 1:
                        raise
                    continue
                assert isinstance(head, ForwardedReply)
                if head.status != 200:
                    return Response(
                        b"".join([c async for c in chunks]), head.status, media_type=head.media_type
                    )
                return StreamingResponse(self._relay(call, chunks), media_type=head.media_type)
            raise AssertionError("unreachable")

        async def _relay(self, call: OpenAICall, chunks: Any) -> AsyncIterator[bytes]:
            """The replica's bytes; when it dies mid-stream, the continuation from a replay."""
            log = StreamLog()
            for attempt in range(MAX_ATTEMPTS):
                splice = StreamSplice(log) if attempt else None
                try:
                    if attempt:
                        chunks = self.engine.options(stream=True).openai_stream.remote(call)
                        head = await chunks.__anext__()
                        if not isinstance(head, ForwardedReply) or head.status != 200:
                            break
                    async for chunk in chunks:
                        out = splice.feed(chunk) if splice else chunk
                        log.record(out)
                        if out:
                            yield out
                    return
                except LOST as exc:
                    lost = exc
                except SpliceMismatchError as exc:
                    yield _error_event(f"the stream could not continue on another replica: {exc}")
                    return
            yield _error_event(f"the replica serving this stream died: {lost}")

    return FleetIngress


def _error_event(message: str) -> bytes:
    return f"data: {json.dumps(_error(message, 500))}\n\n".encode()


def _headers(request: Request) -> dict[str, str]:
    headers = {k: request.headers[k] for k in FORWARDED_HEADERS if k in request.headers}
    if SESSION_HEADER in request.headers:
        headers[SESSION_HEADER] = request.headers[SESSION_HEADER]
    return headers


def _error(message: str, code: int = 400) -> dict[str, Any]:
    kind = {401: "AuthenticationError", 500: "InternalServerError"}.get(code, "BadRequestError")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
