"""Exceptions -> HTTP status codes and OpenAI's error body `{"error": {"message", "type", "param", "code"}}`.

The codes mean what the gRPC server's do (server/servicer.py): a bad request is 400 and never
reached the engine; a full queue 429; a paused or draining server 503; an engine failure 500.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from rollout.openai.requests.served_names import ModelNotFoundError
from rollout.openai.streaming.choice_stream import StreamMismatchError
from rollout.sampling_params import SamplingParams
from rollout.server.loop_errors import (
    EngineStepError,
    NotAcceptingError,
    QueueFullError,
    RequestConflictError,
)
from rollout.structured_outputs.compile_pool import CompilersBusyError

# Most specific first.
_STATUS: tuple[tuple[type[Exception], int, str], ...] = (
    (ModelNotFoundError, 404, "NotFoundError"),
    (ValueError, 400, "BadRequestError"),
    (QueueFullError, 429, "RateLimitError"),
    (CompilersBusyError, 429, "RateLimitError"),
    (NotAcceptingError, 503, "ServiceUnavailableError"),
    (RequestConflictError, 409, "ConflictError"),
    (EngineStepError, 500, "InternalServerError"),
    (StreamMismatchError, 500, "InternalServerError"),
)

# A message starting with one of these names that field even without a colon ("top_p must be ...").
_SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams))


def error_body(message: str, kind: str, status: int, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def status_of(exc: Exception) -> tuple[int, dict[str, Any]]:
    """The status and body for `exc`; anything unexpected is re-raised (a 500 with a traceback logged)."""
    for kind, status, name in _STATUS:
        if isinstance(exc, kind):
            message = str(exc)
            return status, error_body(message, name, status, field_of(message))
    raise exc


def field_of(message: str) -> str | None:
    """The field a message starts with ("top_p: ...", "messages[0].content: ...", "temperature must be
    ..." for a sampling field), or None when it starts with prose ("the server is paused")."""
    head = re.match(r"[A-Za-z_][\w.\[\]]*", message)
    if head is None:
        return None
    word = head.group(0)
    return word if message[head.end() : head.end() + 1] == ":" or word in _SAMPLING_FIELDS else None


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """pydantic's first error as OpenAI words it: an unknown field is "Unrecognized request argument"."""
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    if first.get("type") == "extra_forbidden":
        return f"Unrecognized request argument supplied: {where}", where
    if first.get("type") == "json_invalid":
        return f"the body is not valid JSON: {first.get('msg')}", None
    return f"{where or 'body'}: {first.get('msg')}", where or None
