"""ASGI middleware in front of every route: the bearer token and the body size limit.

The token is the gRPC server's (`rollout serve --token`): `Authorization: Bearer <token>` exactly
once, compared in constant time; /health stays open, as gRPC health does. A body over the limit
is refused with 413 before it is parsed (a chunked one once it grows past the limit).
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from rollout.openai.errors import error_body

OPEN_PATHS = ("/health",)


class Guard:
    def __init__(self, app: Any, token: str | None, max_body_bytes: int):
        if token == "":
            raise ValueError(
                "token: empty; give a non-empty secret, or no token at all to serve without auth"
            )
        self.app = app
        self.expected = f"Bearer {token}".encode() if token is not None else None
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = [(k.lower(), v) for k, v in scope.get("headers", ())]
        if self.expected is not None and scope["path"] not in OPEN_PATHS and not self._authorized(headers):
            return await _refuse(
                send, 401, "missing or wrong bearer token (header 'Authorization')", "AuthenticationError"
            )
        length = [v for k, v in headers if k == b"content-length"]
        if length and length[0].isdigit() and int(length[0]) > self.max_body_bytes:
            return await _refuse(send, 413, self._too_large(), "RequestTooLargeError")
        if not length and scope.get("method") == "POST":
            body = await self._read_limited(receive)
            if body is None:
                return await _refuse(send, 413, self._too_large(), "RequestTooLargeError")
            receive = _replay(body)
        await self.app(scope, receive, send)

    def _authorized(self, headers: list[tuple[bytes, bytes]]) -> bool:
        given = [v for k, v in headers if k == b"authorization"]
        return len(given) == 1 and hmac.compare_digest(given[0], self.expected)

    async def _read_limited(self, receive: Any) -> bytes | None:
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body_bytes:
                return None
            more = message.get("more_body", False)
        return b"".join(chunks)

    def _too_large(self) -> str:
        return f"the request body is larger than {self.max_body_bytes} bytes (--openai-max-body-mb)"


def _replay(body: bytes) -> Any:
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _refuse(send: Any, status: int, message: str, kind: str) -> None:
    body = json.dumps(error_body(message, kind, status)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
