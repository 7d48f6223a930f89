"""Fleets of rollout servers on a Ray cluster: `Fleet(num_servers=M).start().client()`, or one
endpoint over Ray Serve replicas: `ServeFleet(replicas=N, grpc_port=G).start()`, its `base_url`
(OpenAI) and `grpc_address` (RolloutClient) (serve_fleet.py).

An optional layer (`pip install "rollout[ray]"`): it places ordinary `rollout serve` processes as
Ray actors with their resources and hands back an ordinary `RolloutClient` over all of them; nothing
under `rollout/engine` or `rollout/server` knows Ray exists, and the single-server path never
imports it.
"""

from __future__ import annotations

try:
    import ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('rollout.fleet needs Ray: pip install "rollout[ray]"') from exc

from typing import Any

from rollout.fleet.fleet import Fleet

__all__ = ["Fleet", "ServeFleet"]


def __getattr__(name: str) -> Any:
    """ServeFleet loads Ray Serve (and FastAPI) only when asked for."""
    if name == "ServeFleet":
        try:
            from rollout.fleet.serve_fleet import ServeFleet
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ImportError(f'ServeFleet needs Ray Serve ({exc}): pip install "rollout[fleet]"') from exc
        return ServeFleet
    raise AttributeError(f"module 'rollout.fleet' has no attribute {name!r}")
