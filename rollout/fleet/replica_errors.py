"""A replica's error as one short line: Ray wraps what a replica raised in a RayTaskError whose text is the
whole remote traceback (kilobytes), which gRPC refuses as status details over its 8 KiB metadata limit
(the caller then sees RESOURCE_EXHAUSTED instead of the refusal). Callers name the replica themselves."""

from __future__ import annotations

from ray.exceptions import RayTaskError

MAX_DETAILS = 4_000  # characters of a status message the fleet sends: well under gRPC's 8 KiB of metadata


def error_text(exc: BaseException) -> str:
    """`Type: message` of what the replica raised (the cause inside Ray's wrapper), not Ray's traceback."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, RayTaskError) and isinstance(cause, BaseException):
        exc = cause
    return f"{type(exc).__name__}: {exc}"


def bounded(details: str) -> str:
    """`details` cut to what a gRPC status carries, saying so."""
    if len(details) <= MAX_DETAILS:
        return details
    return details[: MAX_DETAILS - 40] + f" ... ({len(details) - MAX_DETAILS + 40} characters cut)"
