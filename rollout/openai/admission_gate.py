"""The HTTP front end's door: who a request is from, and whether it may open now.

Checked on the asyncio thread before any work (tokenizing waits for a worker thread, and every open
request holds one while it waits for samples): a draining or paused server answers 503 at once, and
open requests are bounded by the same fair rule as gRPC's open calls (rollout/server/admission.py):
past the bound, or past its caller's share while the server is busy, 429 with `Retry-After`.

A caller is the `X-Rollout-Caller` header, else OpenAI's `user` field, else the client's address
(not its port: an HTTP/1.1 client opens a connection per concurrent request).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from rollout.server.admission import FairLimit
from rollout.server.engine_loop import EngineLoop

CALLER_HEADER = "x-rollout-caller"  # as gRPC's `rollout-caller` metadata


def http_caller(header: str | None, user: str | None, client_host: str | None) -> str:
    """The caller's key, namespaced apart from gRPC callers."""
    if header:
        return f"openai:{header}"
    if user:
        return f"openai:{user}"
    return f"openai:host:{client_host or 'unknown'}"


def caller_of(request: Request, user: str | None) -> str:
    """An HTTP request's caller key: its caller header, else the body's `user`, else its client host."""
    client_host = request.client.host if request.client else None
    return http_caller(request.headers.get(CALLER_HEADER), user, client_host)


class Gate:
    """Open HTTP generate requests of one front end: at most `capacity`, shared fairly by callers."""

    def __init__(self, loop: EngineLoop, capacity: int) -> None:
        self.loop = loop
        self.open = FairLimit(capacity, "open requests", "--max-generate-calls")

    def enter(self, caller: str) -> Callable[[], None]:
        """Takes a slot for `caller` and returns its release (call it once), or raises:
        NotAcceptingError (503) while the server drains or is paused, AdmissionRefusedError (429)."""
        self.loop.check_accepting()
        self.open.acquire(caller)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open.release(caller)

        return release


class ReleasingStreamingResponse(StreamingResponse):
    """A stream that gives its slot back when the response ends, however it ends (a client that
    leaves before the first chunk included: the body generator then never starts)."""

    def __init__(self, content: Any, on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.on_close()
