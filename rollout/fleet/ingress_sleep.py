"""vLLM's sleep routes on the fleet's OpenAI endpoint: POST /sleep?level=N, POST /wake_up, GET /is_sleeping.

The same answers as one server's (rollout/openai/sleep_routes.py) for the whole fleet (fleet_sleep.py):
the caller's bearer token goes on to each replica, which checks it; /is_sleeping adds `replicas`, each
replica's state, so a fleet that is partly asleep says which replicas sleep. The fan-out blocks on Ray
Serve handle calls, so it runs in a thread off the ingress's event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from rollout.fleet.fleet_sleep import FleetSleepError, fleet_state, sleep_fleet, sleep_states, wake_fleet
from rollout.fleet.replica_names import live_replicas
from rollout.fleet.weight_ledger import NAMESPACE
from rollout.openai.errors import error_body

_STATUS = {
    "INVALID_ARGUMENT": (400, "BadRequestError"),
    "UNAUTHENTICATED": (401, "AuthenticationError"),
    "FAILED_PRECONDITION": (409, "ConflictError"),
    "DEADLINE_EXCEEDED": (504, "TimeoutError"),
}


class FleetSleepRoutes:
    def __init__(self, handle: Any, app_name: str, ledger: str, token: str | None) -> None:
        self.handle, self.app_name, self.ledger_name, self.token = handle, app_name, ledger, token

    def replicas(self) -> list[str]:
        return live_replicas(self.app_name)

    def ledger(self) -> Any:
        return ray.get_actor(self.ledger_name, namespace=NAMESPACE)

    async def sleep(self, request: Request, level: int, abort_running: bool) -> Response:
        metadata = _auth(request)

        def work() -> dict[str, Any]:
            freed = sleep_fleet(self.handle, self.replicas, self.ledger(), level, abort_running, metadata)
            return {"bytes_freed": freed}

        return await _answer(work)

    async def wake_up(self, request: Request, tags: list[str] | None) -> Response:
        metadata = _auth(request)
        return await _answer(
            lambda: wake_fleet(self.handle, self.replicas, self.ledger(), tags, metadata) or {}
        )

    async def is_sleeping(self, request: Request) -> Response:
        metadata = _auth(request)

        def work() -> dict[str, Any]:
            states = sleep_states(self.handle, self.replicas(), metadata)
            fleet = fleet_state(states)
            return _state(fleet) | {"replicas": {r: _state(s) for r, s in states.items()}}

        return await _answer(work)


def _state(state: Any) -> dict[str, Any]:
    return {
        "is_sleeping": state.is_sleeping,
        "level": state.level,
        "sleeping_tags": list(state.sleeping_tags),
        "awaiting_weights": state.awaiting_weights,
    }


def _auth(request: Request) -> tuple[tuple[str, str], ...]:
    value = request.headers.get("authorization")
    return (("authorization", value),) if value else ()


async def _answer(work: Any) -> Response:
    try:
        # run_in_executor, not to_thread: Serve's request context must not follow the handle calls
        return JSONResponse(await asyncio.get_running_loop().run_in_executor(None, work))
    except FleetSleepError as err:
        status, kind = _STATUS.get(err.code, (503, "ServiceUnavailableError"))
        return JSONResponse(error_body(str(err), kind, status), status_code=status)
    except ValueError as err:  # a bad tag
        return JSONResponse(error_body(str(err), "BadRequestError", 400), status_code=400)
