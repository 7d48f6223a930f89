"""Requests whose bytes do not parse are the caller's error: INVALID_ARGUMENT, not gRPC's INTERNAL.

grpcio answers INTERNAL ("Exception deserializing request!") when a request message fails to parse,
for example a string field holding invalid UTF-8. This interceptor wraps every handler's
deserializer so a parse failure reaches the handler as a marker, which aborts with INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc


class _Undecodable:
    def __init__(self, error: Exception) -> None:
        self.error = error


def _abort_undecodable(context: grpc.ServicerContext, request: _Undecodable) -> None:
    context.abort(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request message does not parse: {type(request.error).__name__}: {request.error}",
    )


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:
            return _Undecodable(exc)

    return parse


def _checked_unary(behavior: Callable) -> Callable:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, _Undecodable):
            _abort_undecodable(context, request)
        return behavior(request, context)

    return handle


def _checked_stream(behavior: Callable) -> Callable:
    def handle(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
        def checked() -> Iterator[Any]:
            for request in requests:
                if isinstance(request, _Undecodable):
                    _abort_undecodable(context, request)
                yield request

        return behavior(checked(), context)

    return handle


class DecodeErrorInterceptor(grpc.ServerInterceptor):
    """Turns a request that fails to parse into INVALID_ARGUMENT for every method of the server."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        kinds = (
            ("unary_unary", grpc.unary_unary_rpc_method_handler, _checked_unary),
            ("unary_stream", grpc.unary_stream_rpc_method_handler, _checked_unary),
            ("stream_unary", grpc.stream_unary_rpc_method_handler, _checked_stream),
            ("stream_stream", grpc.stream_stream_rpc_method_handler, _checked_stream),
        )
        for attribute, make, check in kinds:
            behavior = getattr(handler, attribute)
            if behavior is not None:
                return make(
                    check(behavior),
                    request_deserializer=_safe(handler.request_deserializer),
                    response_serializer=handler.response_serializer,
                )
        return handler
