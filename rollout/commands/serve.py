"""`rollout serve`: the gRPC rollout server in the foreground; SIGTERM/SIGINT drain it gracefully."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import ssl
import sys
import threading
import time
from pathlib import Path

from rollout.commands.arg_types import non_negative_float, positive_float, positive_int
from rollout.commands.engine_args import add_engine_args, engine_source, loading_model
from rollout.commands.image_args import add_image_args, image_limits
from rollout.commands.ports import check_bindable, port_number
from rollout.commands.usage import UsageError
from rollout.config import EngineConfig
from rollout.openai.tools.tool_parsers import PARSERS

logger = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
HTTP_CLOSE_S = 0.3  # kept at the end of the grace for closing the HTTP port (uvicorn ticks every 0.1 s)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve the model over gRPC")
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    parser.add_argument(
        "--port", type=port_number, default=50051, help="port (default 50051; 0 picks a free one)"
    )
    parser.add_argument("--token", help="require 'authorization: Bearer <token>' on every RPC")
    parser.add_argument(
        "--token-for-health-and-reflection",
        action="store_true",
        help="with --token, require it for health checks and server reflection too (default: open)",
    )
    parser.add_argument(
        "--tls-cert",
        help="PEM certificate chain; with --tls-key enables TLS on gRPC and on --openai-port (HTTPS)",
    )
    parser.add_argument("--tls-key", help="PEM private key")
    parser.add_argument(
        "--metrics-port", type=port_number, help="also serve Prometheus /metrics over HTTP on loopback"
    )
    parser.add_argument(
        "--max-queue",
        type=positive_int,
        default=4096,
        help="unfinished requests before RESOURCE_EXHAUSTED (default 4096)",
    )
    parser.add_argument(
        "--sleep-requests",
        choices=("wait", "refuse"),
        default="wait",
        help="requests sent while the engine sleeps (rpc Sleep, POST /sleep) wait for wake-up, or are "
        "refused with UNAVAILABLE / 503 (default wait); sleep mode costs nothing until used",
    )
    parser.add_argument(
        "--max-generate-calls",
        type=positive_int,
        default=256,
        help="open generate calls per front end (gRPC Generate/GenerateBatch, HTTP completions), shared "
        "fairly by callers; past it or a caller's share RESOURCE_EXHAUSTED / 429 (default 256)",
    )
    parser.add_argument(
        "--max-message-mb", type=positive_int, default=64, help="largest gRPC message, MiB (default 64)"
    )
    parser.add_argument(
        "--openai-port",
        type=port_number,
        help="also serve the OpenAI-compatible HTTP API on this port, same engine and --host, --token "
        "(needs rollout[openai]; docs/openai.md)",
    )
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        metavar="NAME",
        help="the model names the OpenAI API answers to; replies and /v1/models report the first "
        "(default: the model's path or id; gRPC's GetServerInfo keeps that)",
    )
    parser.add_argument(
        "--tool-call-parser",
        choices=sorted(PARSERS),
        help="how the OpenAI API reads tool calls in replies (default: picked from the chat template)",
    )
    parser.add_argument(
        "--openai-max-body-mb",
        type=positive_int,
        default=64,
        help="largest OpenAI request body, MiB (default 64)",
    )
    parser.add_argument(
        "--grace",
        type=non_negative_float,
        default=30.0,
        help="seconds a SIGTERM leaves running requests, closing both ports included (default 30)",
    )
    parser.add_argument(
        "--structured-compile-timeout",
        type=float,
        default=10.0,
        help="seconds a structured-outputs grammar may take to compile before the request is refused "
        "(400 / INVALID_ARGUMENT naming the field; default 10)",
    )
    parser.add_argument(
        "--structured-compile-workers",
        type=int,
        default=2,
        help="grammar compiles at once; more wait, up to the timeout (default 2)",
    )
    parser.add_argument(
        "--weight-idle-timeout",
        type=positive_float,
        default=120.0,
        help="seconds a weight update may wait on a silent peer (stream gap, group join, broadcast; "
        "default 120)",
    )
    add_engine_args(parser)
    add_image_args(parser)  # image-text-to-text models (commands/image_args.py)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    model, config = check_serve_args(args)  # before the model loads: a bad flag should not cost a minute
    _warn_off_loopback(args)
    logger.info(
        "loading %s: torch and transformers, the weights, the engine (CPU kernels, KV cache, self-check)",
        model,
    )
    from rollout.engine_factory import load_engine
    from rollout.gc_heap import freeze_startup_heap
    from rollout.server.app import RolloutServer, ServerTLS
    from rollout.server.engine_loop import EngineLoop
    from rollout.server.metrics import serve_metrics_http

    with loading_model(model):
        engine = load_engine(model, config, args.tokenizer)
    hooks, names = _weight_sync(args.weight_idle_timeout)
    try:
        server = RolloutServer(
            EngineLoop(
                engine,
                max_pending_requests=args.max_queue,
                grammar_limits=compile_limits(args),
                sleep_requests=args.sleep_requests,
            ),
            host=args.host,
            port=args.port,
            token=args.token,
            token_for_health_and_reflection=args.token_for_health_and_reflection,
            tls=ServerTLS(args.tls_cert, args.tls_key) if args.tls_cert else None,
            max_message_bytes=args.max_message_mb * 2**20,
            max_generate_calls=args.max_generate_calls,
            extra_servicers=hooks,
            extra_service_names=names,
            image_limits=image_limits(args),
        ).start()
    except OSError as exc:  # the port was taken while the model loaded
        raise UsageError(f"--port {args.port}: {exc}; pick another port, or 0 for a free one") from None
    openai_server = _start_openai(args, server) if args.openai_port is not None else None
    if args.metrics_port is not None:
        http = serve_metrics_http(server.metrics, args.metrics_port)
        logger.info("metrics on http://127.0.0.1:%d/metrics", http.server_address[1])
    if args.owns_process:  # it serves until it is stopped
        freeze_startup_heap()
    print(f"rollout serving {engine.model_info.name} on {server.address}", flush=True)
    _wait_for_signal()
    logger.info("draining (grace %.0f s)", args.grace)
    started = time.monotonic()
    _stop(server, openai_server, args.grace)
    logger.info("stopped in %.2f s", time.monotonic() - started)
    if args.owns_process:
        engine.shutdown()  # tensor-parallel workers released (atexit would, but exit_now skips it)
        exit_now(0)  # skips Python's finalization: everything the process held is closed
    return 0


def _stop(server, openai_server, grace: float) -> None:
    """Drains and closes both front ends within `grace` seconds (rollout/server/shutdown.py): the HTTP
    port answers 503 during the drain and closes with the gRPC port."""
    from rollout.server.shutdown import Deadline, closing_seconds

    deadline, closing_s = Deadline(grace), closing_seconds(grace)
    server.drain(grace, closing_s)
    grpc_closed = server.server.stop(grace=deadline.left(floor=0.1))
    if openai_server is not None:  # its port answers 503 until the last response is written
        openai_server.wait_idle(deadline.left() - HTTP_CLOSE_S)
        openai_server.stop(timeout=deadline.left(floor=0.1))
    grpc_closed.wait(deadline.left(floor=0.1))


def _start_openai(args: argparse.Namespace, server):
    """The OpenAI-compatible front end on the gRPC server's engine loop and metrics."""
    from rollout.openai.server import OpenAIServer
    from rollout.server.app import ServerTLS

    try:
        openai_server = OpenAIServer(
            server.loop,
            server.metrics,
            host=args.host,
            port=args.openai_port,
            token=args.token,
            tool_call_parser=args.tool_call_parser,
            max_body_bytes=args.openai_max_body_mb * 2**20,
            max_open_requests=args.max_generate_calls,
            served_model_names=args.served_model_name,
            tls=ServerTLS(args.tls_cert, args.tls_key) if args.tls_cert else None,
            image_limits=image_limits(args),
        ).start()
    except OSError as exc:
        server.stop(grace=0.0)
        raise UsageError(f"--openai-port {args.openai_port}: {exc}; pick another port, or 0") from None
    print(f"rollout openai api on {openai_server.base_url}", flush=True)
    return openai_server


def _warn_off_loopback(args: argparse.Namespace) -> None:
    """Off loopback, both front ends share one rule: the token guards them, TLS encrypts them both."""
    if args.host in LOOPBACK:
        return
    served = "gRPC" if args.openai_port is None else "gRPC and the OpenAI API"
    if not args.token:
        logger.warning(
            "serving %s on %s without --token: anyone who can reach it can replace the weights",
            served,
            args.host,
        )
    if not args.tls_cert:
        logger.warning(
            "serving %s on %s without --tls-cert/--tls-key: requests, replies and the token travel "
            "in clear text",
            served,
            args.host,
        )


def check_serve_args(args: argparse.Namespace) -> tuple[str | Path, EngineConfig]:
    """UsageError for what can be refused before loading: an empty token, TLS files, taken ports, engine
    options, a missing model; else the model to load and its config."""
    if args.token is not None and not args.token.strip():
        raise UsageError(  # it served both front ends with no auth at all
            "--token: empty; give a non-empty secret, or leave --token out to serve without auth"
        )
    _check_tls(args.tls_cert, args.tls_key)
    compile_limits(args)
    image_limits(args)  # a bad image flag is refused before the model loads
    if args.served_model_name is not None and args.openai_port is None:
        raise UsageError("--served-model-name names the model on the OpenAI API; it needs --openai-port")
    for name in args.served_model_name or ():
        if not name.strip():
            raise UsageError(f"--served-model-name {name!r}: a name must not be empty")
    check_bindable(args.host, args.port, "--port")
    if args.metrics_port is not None:
        check_bindable("127.0.0.1", args.metrics_port, "--metrics-port")
    if args.openai_port is not None:
        _check_openai_extra()
        check_bindable(args.host, args.openai_port, "--openai-port")
    return engine_source(args)


def compile_limits(args: argparse.Namespace):
    """The structured-outputs compile bound (rollout/structured_outputs/compile_pool.py)."""
    from rollout.structured_outputs.compile_pool import CompileLimits

    try:
        return CompileLimits(args.structured_compile_timeout, args.structured_compile_workers)
    except ValueError as exc:
        raise UsageError(f"--structured-compile-timeout / --structured-compile-workers: {exc}") from None


def _check_tls(cert: str | None, key: str | None) -> None:
    """Both files or neither, and a pair that loads: gRPC and HTTPS would each refuse it later."""
    if bool(cert) != bool(key):
        raise UsageError("--tls-cert and --tls-key go together; pass both, or neither")
    for flag, path in (("--tls-cert", cert), ("--tls-key", key)):
        if path and not Path(path).is_file():
            raise UsageError(f"{flag} {path}: no such file")
    if cert:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            raise UsageError(
                f"--tls-cert {cert} --tls-key {key}: not a PEM certificate chain and its private key ({exc})"
            ) from None


def _check_openai_extra() -> None:
    """The extra's packages are there (found, not imported: FastAPI takes seconds to import)."""
    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"--openai-port needs the openai extra (no {', '.join(missing)}): pip install 'rollout[openai]'"
        )


def _weight_sync(idle_timeout_s: float) -> tuple[list, list[str]]:
    """The WeightSyncService registration hook, when the weights package provides it."""
    try:
        from rollout.server.weights_servicer import SERVICE_NAME, weight_sync_hook
    except ImportError as exc:
        logger.warning("weight sync unavailable: %s", exc)
        return [], []
    return [weight_sync_hook(idle_timeout_s)], [SERVICE_NAME]


def exit_now(code: int) -> None:
    """Ends the process at once, logs and output flushed: Python's finalization (a final collection
    over the start-up heap, module teardown) took 1.6 s idle on a 2-core CPU, more after load."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
