"""Reading a client stream with an idle timeout, so a silent uploader cannot hold the server forever.

gRPC's server-side request iterator blocks without a timeout. `IdleTimeoutStream` reads it on a
helper thread into a small queue and raises `StreamIdleError` when no message arrived for
`idle_timeout_s`; ending the RPC then ends the helper's read as well.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

M = TypeVar("M")
_END = object()
_QUEUE_MESSAGES = 4  # bounded: a fast client is paced by the reader, never buffered whole


class StreamIdleError(TimeoutError):
    """No message arrived on a client stream within the idle timeout."""


class IdleTimeoutStream(Generic[M]):
    """Iterates `messages`, raising StreamIdleError after `idle_timeout_s` without a message."""

    def __init__(self, messages: Iterator[M], idle_timeout_s: float) -> None:
        self._messages = messages
        self._timeout = idle_timeout_s
        self._queue: queue.Queue[object] = queue.Queue(_QUEUE_MESSAGES)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._read, name="rollout-stream-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        item: object = _END
        try:
            for message in self._messages:
                if not self._put(message):
                    return
        except Exception as exc:  # the RPC was cancelled or ended: the consumer re-raises it
            item = exc
        self._put(item)

    def _put(self, item: object) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[M]:
        return self

    def __next__(self) -> M:
        try:
            item = self._queue.get(timeout=self._timeout)
        except queue.Empty:
            self.close()
            raise StreamIdleError(f"no message for {self._timeout:g} s (the server's idle timeout)") from None
        if item is _END:
            raise StopIteration
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[return-value]

    def close(self) -> None:
        """Stops the reader from queueing more (it exits once its blocked read returns)."""
        self._closed.set()
