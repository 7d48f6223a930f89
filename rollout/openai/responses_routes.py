"""The Responses API's routes: `POST /v1/responses` (streamed or not) and `GET /v1/responses/{id}`.

A request goes the chat way (to_chat.py, then the Frontend: same admission gate, preparation, engine loop
and choice writing as `/v1/chat/completions`), and its one chat choice is written as a Response
(response_object.py) or as stream events (response_events.py). Responses are stored unless `store: false`
(response_store.py); an unknown `previous_response_id` or id is 404, as vLLM answers it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from rollout.openai.admission_gate import ReleasingStreamingResponse, caller_of
from rollout.openai.errors import error_body, status_of
from rollout.openai.frontend import Frontend, usage_of, write_chat
from rollout.openai.requests.prepare import Prepared
from rollout.openai.responses_api.response_events import ResponseEvents
from rollout.openai.responses_api.response_object import Reply, finished_response, response_head
from rollout.openai.responses_api.response_store import ResponseNotFoundError, ResponseStore, StoredResponse
from rollout.openai.responses_api.schemas import ResponsesRequest
from rollout.openai.responses_api.to_chat import ChatPlan, to_chat
from rollout.openai.streaming.choice_stream import StreamMismatchError
from rollout.server.handle import RequestHandle
from rollout.server.loop_errors import LoopError

CLIENT_CLOSED = 499


def register_responses(app: FastAPI, frontend: Frontend, store: ResponseStore | None = None) -> ResponseStore:
    """Adds the routes to `app`; returns the store they keep responses in."""
    store = store or ResponseStore()

    @app.post("/v1/responses")
    async def create(req: ResponsesRequest, request: Request) -> Response:
        return await _create(frontend, store, req, request)

    @app.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str) -> Response:
        return JSONResponse(store.get(response_id, "response_id").response)

    async def not_found(request: Request, exc: Exception) -> Response:
        return JSONResponse(
            error_body(str(exc), "NotFoundError", 404, str(exc).split(":")[0]), status_code=404
        )

    app.add_exception_handler(ResponseNotFoundError, not_found)
    return store


async def _create(
    frontend: Frontend, store: ResponseStore, req: ResponsesRequest, request: Request
) -> Response:
    caller = caller_of(request, req.user)
    release = frontend.gate.enter(caller)  # 503 while draining, 429 past the bound or the caller's share
    streaming = False
    try:
        plan = await frontend.run(to_chat, req, store)
        request_id, prepared, handle = await frontend.submit(plan.chat, "resp", caller)
        head = response_head(request_id, int(time.time()), frontend.served.primary, req)
        counted: list[int] = []
        if req.stream:
            events = ResponseEvents(head, req.logprobs)
            chunks = frontend.deltas(handle, prepared, True, counted)
            body = _stream(
                events,
                chunks,
                lambda reply: _finish(store, req, plan, prepared, head, reply, counted, handle),
            )
            streaming = True  # the response releases the slot when it ends
            return ReleasingStreamingResponse(body, release, media_type="text/event-stream")
        choices = await frontend.collect(handle, prepared, write_chat, request.is_disconnected, counted)
    finally:
        if not streaming:
            release()
    if choices is None:
        return Response(status_code=CLIENT_CLOSED)
    return JSONResponse(
        _finish(store, req, plan, prepared, head, Reply.of_choice(choices[0]), counted, handle)
    )


def _finish(
    store: ResponseStore,
    req: ResponsesRequest,
    plan: ChatPlan,
    prepared: Prepared,
    head: dict[str, Any],
    reply: Reply,
    counted: list[int],
    handle: RequestHandle,
) -> dict[str, Any]:
    """The finished Response, stored unless `store: false`."""
    prompt_ids = list(prepared.submissions[0].prompt_token_ids)
    usage = usage_of(prepared, counted, handle)
    wants_ids = req.return_token_ids is not False
    response = finished_response(head, reply, usage, prompt_ids, prepared.extensions, wants_ids)
    if req.stored:
        conversation = [*plan.conversation, reply.message()]
        tokens = prompt_ids + list(reply.token_ids)
        store.put(head["id"], StoredResponse(response, conversation, req.instructions, tokens))
    return response


async def _stream(
    events: ResponseEvents, chunks: AsyncIterator[dict[str, Any]], finish: Any
) -> AsyncIterator[bytes]:
    """Server-sent events as OpenAI sends them (`event:` and `data:` lines; no `[DONE]`). An error after
    the stream started is an `error` event, as vLLM sends it."""
    try:
        for event in events.opening():
            yield _sse(event)
        async for choice in chunks:
            for event in events.push(choice):
                yield _sse(event)
        for event in events.closing(finish(events.reply())):
            yield _sse(event)
    except (ValueError, LoopError, StreamMismatchError) as exc:
        error = status_of(exc)[1]["error"]
        yield _sse(
            events.event("error", code=str(error["code"]), message=error["message"], param=error["param"])
        )


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
