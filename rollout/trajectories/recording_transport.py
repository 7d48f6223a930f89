"""httpx transports that pass every request on unchanged but for logprobs, and hand each chat / Responses
reply (streamed or not) to a sink once its body is complete; the sink is opened when the request is sent
(so a streamed reply read later still goes where its request was made).

They wrap any inner transport, so they fit under an `openai.OpenAI` / `AsyncOpenAI` client (its
`http_client`) or any framework that takes one. A streamed body is passed through chunk by chunk as it
arrives and read by the callback at its end; a stream the caller drops before its end records nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx

LOGPROBS_INCLUDE = "message.output_text.logprobs"
Sink = Callable[[bytes, bool], None]  # (the reply's body, streamed): called once it is complete
OnRequest = Callable[[str, httpx.Request], Sink]  # (endpoint, request) -> where its reply goes


def endpoint_of(request: httpx.Request) -> str | None:
    if request.method != "POST":
        return None
    path = request.url.path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    return None


def asking_logprobs(request: httpx.Request, endpoint: str) -> httpx.Request:
    """`request` asking for the sampled tokens' logprobs when it does not say (chat: `logprobs: true`;
    Responses: the logprobs `include`); a request that says `logprobs: false` is left as it is."""
    try:
        body = json.loads(request.content)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return request
    if endpoint == "chat" and "logprobs" not in body:
        body["logprobs"] = True
    elif endpoint == "responses" and LOGPROBS_INCLUDE not in (body.get("include") or []):
        body["include"] = [*(body.get("include") or []), LOGPROBS_INCLUDE]
    else:
        return request
    headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
    return httpx.Request(
        request.method,
        request.url,
        headers=headers,
        content=json.dumps(body).encode(),
        extensions=request.extensions,
    )


def _streamed(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


def _restreamed(response: httpx.Response, request: httpx.Request, stream: Any) -> httpx.Response:
    """`response` with its body read through `stream` (a tee that records what passes)."""
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        stream=stream,
        request=request,
        extensions=response.extensions,
    )


class RecordingTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport, on_request: OnRequest, ask_logprobs: bool = True) -> None:
        self.inner, self.on_request, self.ask_logprobs = inner, on_request, ask_logprobs

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        endpoint = endpoint_of(request)
        if endpoint is None:
            return self.inner.handle_request(request)
        if self.ask_logprobs:
            request = asking_logprobs(request, endpoint)
        sink = self.on_request(endpoint, request)
        response = self.inner.handle_request(request)
        if response.status_code != 200:
            return response
        if not _streamed(response):
            sink(response.read(), False)
            return response
        return _restreamed(response, request, _Tee(response.stream, lambda raw: sink(raw, True)))

    def close(self) -> None:
        self.inner.close()


class AsyncRecordingTransport(httpx.AsyncBaseTransport):
    def __init__(
        self, inner: httpx.AsyncBaseTransport, on_request: OnRequest, ask_logprobs: bool = True
    ) -> None:
        self.inner, self.on_request, self.ask_logprobs = inner, on_request, ask_logprobs

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        endpoint = endpoint_of(request)
        if endpoint is None:
            return await self.inner.handle_async_request(request)
        if self.ask_logprobs:
            request = asking_logprobs(request, endpoint)
        sink = self.on_request(endpoint, request)
        response = await self.inner.handle_async_request(request)
        if response.status_code != 200:
            return response
        if not _streamed(response):
            sink(await response.aread(), False)
            return response
        return _restreamed(response, request, _AsyncTee(response.stream, lambda raw: sink(raw, True)))

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Kept:
    """The chunks a stream passed on, handed to `done` once: at its end or when it is closed (the `openai`
    client closes a stream at `[DONE]` without reading on). What was read is all there is: a stream
    dropped before its final chunk holds no finished reply, and stream_capture.py finds none in it."""

    def __init__(self, done: Callable[[bytes], None]) -> None:
        self.done: Callable[[bytes], None] | None = done
        self.chunks: list[bytes] = []

    def finish(self) -> None:
        done, self.done = self.done, None
        if done is not None:
            done(b"".join(self.chunks))


class _Tee(httpx.SyncByteStream):
    def __init__(self, stream: Any, done: Callable[[bytes], None]) -> None:
        self.stream, self.kept = stream, _Kept(done)

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            self.kept.chunks.append(chunk)
            yield chunk
        self.kept.finish()

    def close(self) -> None:
        self.stream.close()
        self.kept.finish()


class _AsyncTee(httpx.AsyncByteStream):
    def __init__(self, stream: Any, done: Callable[[bytes], None]) -> None:
        self.stream, self.kept = stream, _Kept(done)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            self.kept.chunks.append(chunk)
            yield chunk
        self.kept.finish()

    async def aclose(self) -> None:
        await self.stream.aclose()
        self.kept.finish()
