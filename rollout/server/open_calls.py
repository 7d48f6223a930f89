"""A bound on open generate calls, so health, metrics and admin calls always find a thread.

grpcio's sync server runs each RPC on a thread of one pool until the RPC ends, and a Generate stream
holds its thread while it waits for samples: 1,000 open streams took all 256 threads and a health
check waited 9.9 s. The pool now has `max_generate_calls` threads for Generate and GenerateBatch plus
`control_threads` they never take: a generate call beyond the bound is answered RESOURCE_EXHAUSTED at
once (not queued behind the others), so every other RPC runs on a free thread whatever the load.
The bound is shared fairly between callers (admission.py, callers.py): one caller holding most of the
calls cannot make another caller's calls fail.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from rollout.server.admission import AdmissionRefusedError, FairLimit
from rollout.server.callers import grpc_caller
from rollout.server.loop_errors import NotAcceptingError
from rollout.server.retry_after import abort_retry_later

GENERATE_METHODS = ("/rollout.v1.RolloutService/Generate", "/rollout.v1.RolloutService/GenerateBatch")


class OpenCallLimit(grpc.ServerInterceptor):
    """Admits at most `limit` open calls of `methods`, shared fairly by callers (admission.FairLimit);
    a call past the bound or past its caller's share is RESOURCE_EXHAUSTED with a retry-after hint.

    A call takes its slot when its handler starts and gives it back when gRPC ends the RPC (finished,
    cancelled, deadline, client gone); the handler returns then too (it cancels its request).
    """

    def __init__(
        self,
        limit: int,
        methods: tuple[str, ...] = GENERATE_METHODS,
        check_accepting: Callable[[], None] = lambda: None,
    ) -> None:
        self.limit = limit
        # raises NotAcceptingError while the server drains or is paused: UNAVAILABLE, not a slot
        self._check_accepting = check_accepting
        self.slots = FairLimit(limit, "open generate calls", "--max-generate-calls")
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
        try:
            self._check_accepting()
        except NotAcceptingError as refusal:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(refusal))
        caller = grpc_caller(context)
        try:
            self.slots.acquire(caller)
        except AdmissionRefusedError as refusal:
            abort_retry_later(context, refusal, "send more prompts per call")
        release = functools.partial(self.slots.release, caller)
        if not context.add_callback(release):  # gRPC calls it once, when the RPC ends
            release()  # the RPC already ended: its handler returns at once
