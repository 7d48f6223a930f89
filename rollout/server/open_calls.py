"""A bound on open generate calls, so health, metrics and admin calls always find a thread.

grpcio's sync server runs each RPC on a thread of one pool until the RPC ends, and a Generate stream
holds its thread while it waits for samples: 1,000 open streams took all 256 threads and a health
check waited 9.9 s. The pool now has `max_generate_calls` threads for Generate and GenerateBatch plus
`control_threads` they never take: a generate call beyond the bound is answered RESOURCE_EXHAUSTED at
once (not queued behind the others), so every other RPC runs on a free thread whatever the load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

GENERATE_METHODS = ("/rollout.v1.RolloutService/Generate", "/rollout.v1.RolloutService/GenerateBatch")


class OpenCallLimit(grpc.ServerInterceptor):
    """Admits at most `limit` open calls of `methods`; the next one is RESOURCE_EXHAUSTED.

    A call takes its slot when its handler starts and gives it back when gRPC ends the RPC (finished,
    cancelled, deadline, client gone); the handler returns then too (it cancels its request).
    """

    def __init__(self, limit: int, methods: tuple[str, ...] = GENERATE_METHODS) -> None:
        if limit < 1:
            raise ValueError(f"max_generate_calls must be at least 1, got {limit}")
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._methods = frozenset(methods)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler_call_details.method not in self._methods:
            return handler
        if handler.unary_stream is not None:
            make, behavior = grpc.unary_stream_rpc_method_handler, self._bounded_stream(handler.unary_stream)
        elif handler.unary_unary is not None:
            make, behavior = grpc.unary_unary_rpc_method_handler, self._bounded_unary(handler.unary_unary)
        else:
            return handler
        return make(
            behavior,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _bounded_unary(self, behavior: Callable) -> Callable:
        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            self._enter(context)
            return behavior(request, context)

        return handle

    def _bounded_stream(self, behavior: Callable) -> Callable:
        def handle(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            self._enter(context)
            yield from behavior(request, context)

        return handle

    def _enter(self, context: grpc.ServicerContext) -> None:
        """Takes a slot until the RPC ends, or aborts the call RESOURCE_EXHAUSTED."""
        if not self._slots.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"{self.limit} generate calls are open, the server's limit (rollout serve "
                "--max-generate-calls); retry later, or send more prompts per call",
            )
        if not context.add_callback(self._slots.release):  # gRPC calls it once, when the RPC ends
            self._slots.release()  # the RPC already ended: its handler returns at once
