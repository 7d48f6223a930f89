"""vLLM's sleep-mode routes on the OpenAI port: POST /sleep?level=N, POST /wake_up?tags=..., GET /is_sleeping.

vLLM serves them in its dev mode for RL frameworks that drive a colocated server over HTTP; here they sit
behind the same token as every route (the Guard), since sleeping stops the server serving. The work is
server/sleep_control.py's, shared with the gRPC RPCs. Errors: 400 a bad level or tag, 409 the engine's
state refuses (already asleep, not supported here), 504 running requests outlived `timeout`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse, Response

from rollout.engine.sleep.engine_memory import SleepModeError
from rollout.openai.errors import error_body
from rollout.server.sleep_control import sleep, sleep_state, wake_up

_REFUSALS = ((ValueError, 400, "BadRequestError"), (SleepModeError, 409, "ConflictError"))


def add_sleep_routes(app: FastAPI, frontend: Any) -> None:
    """`frontend`: the app's Frontend (its engine loop and executor)."""

    @app.post("/sleep")
    async def sleep_route(
        level: int = 1, abort_running: bool = False, timeout: float | None = None
    ) -> Response:
        return await _answer(
            frontend, lambda: {"bytes_freed": sleep(frontend.loop, level, abort_running, timeout)}
        )

    @app.post("/wake_up")
    async def wake_up_route(tags: list[str] | None = Query(default=None)) -> Response:  # noqa: B008
        return await _answer(frontend, lambda: wake_up(frontend.loop, tags) or {})

    @app.get("/is_sleeping")
    async def is_sleeping_route() -> Response:
        def read() -> dict[str, Any]:
            state = sleep_state(frontend.loop)
            return {
                "is_sleeping": state.is_sleeping,
                "level": state.level,
                "sleeping_tags": list(state.sleeping_tags),
                "awaiting_weights": state.awaiting_weights,
            }

        return await _answer(frontend, read)


async def _answer(frontend: Any, work: Any) -> Response:
    try:
        return JSONResponse(await frontend.run(work))
    except TimeoutError as exc:
        return JSONResponse(error_body(str(exc), "TimeoutError", 504), status_code=504)
    except (ValueError, SleepModeError) as exc:
        status, kind = next((s, k) for cls, s, k in _REFUSALS if isinstance(exc, cls))
        return JSONResponse(error_body(str(exc), kind, status), status_code=status)
