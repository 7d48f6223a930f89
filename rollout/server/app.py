"""Builds the gRPC server around an EngineLoop: services, health, reflection, auth and TLS.

Secure by default: binds loopback unless told otherwise; an optional bearer token guards every RPC
but health and reflection (those too with `token_for_health_and_reflection`). Other services (weight sync) plug in through `extra_servicers`.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rollout.multimodal.image_parts import ImageLimits
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.server.boot_id import BootIdInterceptor, new_boot_id
from rollout.server.decode_errors import DecodeErrorInterceptor
from rollout.server.engine_loop import EngineLoop
from rollout.server.metrics import Metrics
from rollout.server.open_calls import OpenCallLimit
from rollout.server.reflection import V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME, add_reflection
from rollout.server.servicer import SERVICE_NAME, RolloutServicer
from rollout.server.shutdown import MIN_ABORT_WAIT_S, Deadline, closing_seconds

logger = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20
DEFAULT_MAX_GENERATE_CALLS = 256
DEFAULT_CONTROL_THREADS = 32  # health, metrics, admin and weight-sync calls: never taken by generate calls
HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
ServicerHook = Callable[[grpc.Server, EngineLoop, str], None]  # (server, its loop, its boot id)
OPEN_SERVICES = (HEALTH_SERVICE_NAME, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)


@dataclass(frozen=True)
class ServerTLS:
    """PEM files of the server's certificate chain and private key."""

    cert_file: str | Path
    key_file: str | Path

    def credentials(self) -> grpc.ServerCredentials:
        pair = (Path(self.key_file).read_bytes(), Path(self.cert_file).read_bytes())
        return grpc.ssl_server_credentials([pair])


class BearerTokenInterceptor(grpc.ServerInterceptor):
    """Answers UNAUTHENTICATED unless metadata carries `authorization: Bearer <token>`, exactly once.

    Services in `open_services` (by default health and reflection: they reveal nothing secret) stay
    open so load balancers, orchestrators and tools like grpcurl can probe without the secret.
    """

    def __init__(self, token: str, open_services: Sequence[str] = OPEN_SERVICES):
        if not token:
            raise ValueError(
                "token: empty; give a non-empty secret, or no token at all to serve without auth"
            )
        self._expected = f"Bearer {token}".encode()
        self._open = tuple(f"/{name}/" for name in open_services)
        self._deny = _denial("missing or wrong bearer token (metadata 'authorization')")
        self._deny_repeated = _denial("metadata 'authorization' was sent more than once; send it once")

    def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(self._open):
            return continuation(handler_call_details)
        given = [v for k, v in handler_call_details.invocation_metadata or () if k == "authorization"]
        if len(given) > 1:
            return self._deny_repeated  # which one would count is a proxy's guess: refuse, never pick
        if given and hmac.compare_digest(str(given[0]).encode(), self._expected):
            return continuation(handler_call_details)
        return self._deny


def _denial(details: str) -> grpc.RpcMethodHandler:
    """A handler that refuses before reading any request message: as stream-stream it fits every kind of
    RPC (a unary-request handler would first wait for exactly one message, and an empty client stream,
    e.g. an UpdateWeights with nothing to send, got UNIMPLEMENTED instead)."""

    def deny(requests: object, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, details)

    return grpc.stream_stream_rpc_method_handler(deny)


def build_server(
    engine_loop: EngineLoop,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    tls: ServerTLS | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    extra_servicers: Sequence[ServicerHook] = (),
    extra_service_names: Sequence[str] = (),
    health_servicer: health.HealthServicer | None = None,
    metrics: Metrics | None = None,
    max_generate_calls: int = DEFAULT_MAX_GENERATE_CALLS,
    control_threads: int = DEFAULT_CONTROL_THREADS,
    token_for_health_and_reflection: bool = False,
    boot_id: str | None = None,
    image_limits: ImageLimits | None = None,
) -> tuple[grpc.Server, int]:
    """A server (not started) with RolloutService, health, reflection and every extra servicer.

    Returns (server, bound_port); `port=0` picks a free port. Each hook registers its servicer on
    the server; list the full names of their services in `extra_service_names` for reflection.
    With a `token`, health and reflection stay open unless `token_for_health_and_reflection`.
    At most `max_generate_calls` Generate/GenerateBatch calls are open at once (the next one is
    RESOURCE_EXHAUSTED); every other RPC has `control_threads` threads they never take (open_calls.py).
    Every response carries `boot_id` (default: a fresh one) as metadata (boot_id.py).
    """
    boot_id = boot_id or new_boot_id()
    options = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
    ]
    open_services = () if token_for_health_and_reflection else OPEN_SERVICES
    if control_threads < 1:
        raise ValueError(f"control_threads must be at least 1, got {control_threads}")
    interceptors = [
        BootIdInterceptor(boot_id),  # first: a refused token is answered with the boot id too
        *([BearerTokenInterceptor(token, open_services)] if token is not None else []),
        OpenCallLimit(max_generate_calls, check_accepting=engine_loop.check_accepting),
        DecodeErrorInterceptor(),
    ]
    threads = futures.ThreadPoolExecutor(max_generate_calls + control_threads, "rollout-rpc")
    server = grpc.server(threads, interceptors=interceptors, options=options)
    pb_grpc.add_RolloutServiceServicer_to_server(
        RolloutServicer(engine_loop, metrics or Metrics(engine_loop), boot_id, image_limits), server
    )
    for hook in extra_servicers:
        hook(server, engine_loop, boot_id)
    health_servicer = health_servicer or health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [SERVICE_NAME, *extra_service_names]
    for name in ("", *names):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    add_reflection(server, [*names, HEALTH_SERVICE_NAME])
    address = f"{host}:{port}"
    bound = server.add_secure_port(address, tls.credentials()) if tls else server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"could not bind {address}")
    return server, bound


class RolloutServer:
    """A started server plus what a graceful stop needs: its loop and its health status."""

    def __init__(self, engine_loop: EngineLoop, **build_kwargs: object):
        self.loop = engine_loop
        self.health = health.HealthServicer()
        self.metrics = Metrics(engine_loop)
        self.boot_id = new_boot_id()  # this server's identity on every response
        self.server, self.port = build_server(
            engine_loop,
            health_servicer=self.health,
            metrics=self.metrics,
            boot_id=self.boot_id,
            **build_kwargs,
        )
        self.host = str(build_kwargs.get("host", "127.0.0.1"))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> RolloutServer:
        self.loop.start()
        self.server.start()
        logger.info("rollout server listening on %s", self.address)
        return self

    def drain(self, grace: float | None, closing_s: float) -> None:
        """Health NOT_SERVING, no new requests on any front end (UNAVAILABLE / 503); the running ones
        get `grace - closing_s` seconds (None: as long as they take), then the rest are aborted and
        their abort samples handed to their calls within `closing_s` (rollout/server/shutdown.py)."""
        self.health.enter_graceful_shutdown()
        drain_s = None if grace is None else max(grace - closing_s, 0.0)
        self.loop.stop(drain_s, abort_wait=max(closing_s / 2, MIN_ABORT_WAIT_S))

    def stop(self, grace: float | None = 5.0) -> None:
        """`drain`, then close the port: all within `grace` seconds (None: once every request ended)."""
        deadline, closing_s = Deadline(grace), closing_seconds(grace)
        self.drain(grace, closing_s)
        self.server.stop(grace=closing_s if grace is None else deadline.left(floor=0.1)).wait()

    def __enter__(self) -> RolloutServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(grace=0.0)
