"""BootIds: which server process answered at each address, so a client notices a restarted server.

Every response of a rollout server carries its boot id (rollout/server/boot_id.py). A client routes
all its calls (generation, control, weight pushes) through channels wrapped by `track`, which records
the id of every call when its caller reads the outcome: a result, a streamed message or an error.
`restarts()` counts, per address, how often the id changed: a counter never goes back, so a caller
that keeps a copy sees any restart since, even one it never made a call to. `first()` keeps the
process the client reached first (whose loaded weights an adapter push names before any base push).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import grpc

from rollout.protocol.metadata import BOOT_ID_KEY

logger = logging.getLogger(__name__)


class BootIds:
    """The last boot id seen per address and how many times it changed (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, str] = {}
        self._first: dict[str, str] = {}
        self._restarts: dict[str, int] = {}

    def latest(self) -> dict[str, str]:
        with self._lock:
            return dict(self._latest)

    def first(self) -> dict[str, str]:
        """Per address: the boot id of the first process that answered there."""
        with self._lock:
            return dict(self._first)

    def restarts(self) -> dict[str, int]:
        """Per address seen so far: how many times its boot id changed (0: the same process throughout)."""
        with self._lock:
            return dict(self._restarts)

    def record(self, address: str, boot_id: str) -> None:
        with self._lock:
            previous = self._latest.get(address)
            if previous == boot_id:
                return
            self._latest[address] = boot_id
            self._first.setdefault(address, boot_id)
            self._restarts[address] = self._restarts.get(address, -1) + 1
        if previous is not None:
            logger.warning("rollout server %s restarted (boot id %s -> %s)", address, previous, boot_id)

    def track(self, address: str, channel: grpc.Channel) -> grpc.Channel:
        """`channel` with every call's boot id recorded under `address`."""
        return grpc.intercept_channel(channel, _Recorder(self, address))


class _Recorder(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, boot_ids: BootIds, address: str) -> None:
        self.boot_ids, self.address = boot_ids, address

    def _observed(self, call: Any) -> _ObservedCall:
        return _ObservedCall(call, lambda boot_id: self.boot_ids.record(self.address, boot_id))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return self._observed(continuation(client_call_details, request))

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return self._observed(continuation(client_call_details, request))

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return self._observed(continuation(client_call_details, request_iterator))

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return self._observed(continuation(client_call_details, request_iterator))


class _ObservedCall:
    """A call (future, or response iterator) that records its boot id in the thread reading it.

    Recording when the caller reads, not in a done-callback, means the id is recorded before the
    caller can act on the response. Everything else is the wrapped call's own.
    """

    def __init__(self, call: Any, record: Any) -> None:
        self._call, self._record, self._recorded = call, record, False

    def _note(self) -> None:
        # Only once metadata is in: after a message, or once the call is over (never blocks).
        if self._recorded:
            return
        self._recorded = True
        metadata = self._call.initial_metadata() or ()
        boot_id = next((value for key, value in metadata if key == BOOT_ID_KEY), None)
        if boot_id:
            self._record(str(boot_id))

    def _note_if_done(self) -> None:
        if self._call.done():
            self._note()

    def result(self, timeout: float | None = None) -> Any:
        try:
            return self._call.result(timeout)
        finally:
            self._note_if_done()

    def exception(self, timeout: float | None = None) -> Any:
        try:
            return self._call.exception(timeout)
        finally:
            self._note_if_done()

    def __iter__(self) -> _ObservedCall:
        return self

    def __next__(self) -> Any:
        try:
            message = next(self._call)
        except BaseException:
            self._note_if_done()
            raise
        self._note()
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)
