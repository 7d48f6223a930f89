"""The ways the engine loop refuses or fails a request; the servicer maps each to a gRPC status code."""

from __future__ import annotations


class LoopError(Exception):
    """A request the loop refused or could not finish; the server maps each kind to a status code."""


class QueueFullError(LoopError):
    """The admission queue is full (RESOURCE_EXHAUSTED)."""


class NotAcceptingError(LoopError):
    """The loop is paused, draining or stopped (UNAVAILABLE)."""


class RequestConflictError(LoopError):
    """A request id was reused for a different prompt or different sampling params (ALREADY_EXISTS)."""


class EngineStepError(LoopError):
    """The engine raised during a step that this request was part of (INTERNAL)."""
