"""Exceptions -> HTTP status codes and OpenAI's error body `{"error": {"message", "type", "param", "code"}}`.

The codes mean what the gRPC server's do (server/servicer.py): a bad request is 400 and never
reached the engine; a full queue 429; a paused or draining server 503; an engine failure 500.
"""

from __future__ import annotations

from typing import Any

from rollout.openai.choice_stream import StreamMismatchError
from rollout.openai.served_names import ModelNotFoundError
from rollout.server.loop_errors import (
    EngineStepError,
    NotAcceptingError,
    QueueFullError,
    RequestConflictError,
)

# Most specific first.
_STATUS: tuple[tuple[type[Exception], int, str], ...] = (
    (ModelNotFoundError, 404, "NotFoundError"),
    (ValueError, 400, "BadRequestError"),
    (QueueFullError, 429, "RateLimitError"),
    (NotAcceptingError, 503, "ServiceUnavailableError"),
    (RequestConflictError, 409, "ConflictError"),
    (EngineStepError, 500, "InternalServerError"),
    (StreamMismatchError, 500, "InternalServerError"),
)


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def status_of(exc: Exception) -> tuple[int, dict[str, Any]]:
    """The status and body for `exc`; anything unexpected is re-raised (a 500 with a traceback logged)."""
    for kind, status, name in _STATUS:
        if isinstance(exc, kind):
            message = str(exc)
            return status, error_body(message, name, status, message.split(":", 1)[0] or None)
    raise exc


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """pydantic's first error as OpenAI words it: an unknown field is "Unrecognized request argument"."""
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    if first.get("type") == "extra_forbidden":
        return f"Unrecognized request argument supplied: {where}", where
    if first.get("type") == "json_invalid":
        return f"the body is not valid JSON: {first.get('msg')}", None
    return f"{where or 'body'}: {first.get('msg')}", where or None
