"""The server's boot identity: a random id per server process, on every response it sends.

A restarted server has lost every weight update pushed to it, yet answers on the same address with
the same version numbers a trainer may expect; only its boot id tells it apart. The id goes out as
initial metadata `rollout-boot-id` on every RPC (errors, health and reflection included) and in
GetServerInfoResponse.boot_id.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import grpc

from rollout.protocol.metadata import BOOT_ID_KEY


def new_boot_id() -> str:
    return uuid.uuid4().hex


class BootIdInterceptor(grpc.ServerInterceptor):
    """Sends `rollout-boot-id: <boot_id>` as initial metadata before any handler runs.

    Install it first, so the answers of interceptors after it (a refused token) carry it too.
    """

    def __init__(self, boot_id: str) -> None:
        self.boot_id = boot_id
        self._metadata = ((BOOT_ID_KEY, boot_id),)

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        kinds = (
            ("unary_unary", grpc.unary_unary_rpc_method_handler),
            ("unary_stream", grpc.unary_stream_rpc_method_handler),
            ("stream_unary", grpc.stream_unary_rpc_method_handler),
            ("stream_stream", grpc.stream_stream_rpc_method_handler),
        )
        for attribute, make in kinds:
            behavior = getattr(handler, attribute)
            if behavior is not None:
                return make(
                    self._announcing(behavior),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

    def _announcing(self, behavior: Callable) -> Callable:
        def handle(request_or_iterator: Any, context: grpc.ServicerContext) -> Any:
            context.send_initial_metadata(self._metadata)
            return behavior(request_or_iterator, context)

        return handle
