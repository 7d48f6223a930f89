"""`rollout fleet serve --replicas N`: N engine replicas on Ray Serve behind one OpenAI endpoint and one gRPC address.

Model and engine flags are `rollout serve`'s, passed on to every replica (checked here first, before
Ray starts). Ray is started locally unless `--ray-address` names a cluster. The OpenAI API is served
on `--openai-port` (Ray Serve's HTTP proxy), the fleet's gRPC address on `--port` (a `RolloutClient`
takes it like a server's: rollout/fleet/grpc_front.py); each replica's own address is printed too.
"""

from __future__ import annotations

import argparse
import signal
import threading

from rollout.commands.arg_types import non_negative_float, positive_float, positive_int
from rollout.commands.ports import check_bindable, port_number
from rollout.commands.usage import UsageError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fleet", help="one endpoint over N replicas on Ray Serve")
    commands = parser.add_subparsers(dest="fleet_command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve N replicas behind one OpenAI endpoint and one gRPC address (other flags: rollout serve's)",
    )
    serve.add_argument("--replicas", type=positive_int, required=True, help="engine replicas")
    serve.add_argument("--openai-port", type=port_number, default=8000, help="the OpenAI API (default 8000)")
    serve.add_argument(
        "--port",
        type=port_number,
        default=50051,
        help="the fleet's gRPC address for RolloutClient: generate, score, pushes, sleep (default 50051)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    serve.add_argument("--token", help="require 'authorization: Bearer <token>' (required off loopback)")
    serve.add_argument("--num-cpus", type=positive_float, default=1.0, help="CPUs per replica (default 1)")
    serve.add_argument(
        "--num-gpus", type=non_negative_float, default=0.0, help="GPUs per replica (default 0)"
    )
    serve.add_argument("--round-robin", action="store_true", help="route without cache affinity (a baseline)")
    serve.add_argument("--ray-address", help="join this Ray cluster (default: start one locally)")
    serve.set_defaults(run=run, args=[])


def run(args: argparse.Namespace) -> int:
    serve_args = list(args.args)
    _check_serve_args(serve_args)
    check_bindable(args.host, args.port, "--port")
    from rollout.fleet import ServeFleet

    ray_init = {"address": args.ray_address} if args.ray_address else {}
    try:
        fleet = ServeFleet(
            args.replicas,
            serve_args,
            openai_port=args.openai_port,
            grpc_port=args.port,
            host=args.host,
            token=args.token,
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            round_robin=args.round_robin,
            **ray_init,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with fleet:
        replicas = fleet.wait_for_replicas()
        print(f"rollout fleet openai api on {fleet.base_url}", flush=True)
        print(f"rollout fleet grpc on {fleet.grpc_address}", flush=True)
        for replica in replicas:
            print(f"rollout fleet replica {replica['replica']} grpc on {replica['grpc_address']}", flush=True)
        _wait_for_signal()
    return 0


def _check_serve_args(serve_args: list[str]) -> None:
    """The replicas' flags, checked as `rollout serve` checks them (a bad flag fails here, at once)."""
    from rollout.commands.serve import check_serve_args
    from rollout.commands.serve_flags import parse_serve_flags

    for owned in ("--port", "--host", "--token", "--openai-port"):
        if owned in serve_args:
            raise UsageError(f"{owned}: set by `rollout fleet serve` itself, not per replica")
    check_serve_args(parse_serve_flags([*serve_args, "--port", "0", "--openai-port", "0"]))


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
