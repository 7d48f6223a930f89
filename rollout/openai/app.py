"""The FastAPI app: /v1/models, /v1/completions, /v1/chat/completions, /health, /metrics.

Routes only translate: a Frontend does the work on the engine loop, errors become OpenAI's error
body with the status code of errors.py, and the Guard checks the token and the body size first.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from rollout.openai.admission_gate import ReleasingStreamingResponse, caller_of
from rollout.openai.errors import error_body, status_of, validation_message
from rollout.openai.frontend import (
    Frontend,
    WriteChoice,
    prompt_fields,
    usage_of,
    write_chat,
    write_completion,
)
from rollout.openai.guard import Guard
from rollout.openai.requests.schemas import ChatCompletionRequest, CompletionRequest
from rollout.openai.requests.served_names import ModelNotFoundError
from rollout.openai.responses_routes import register_responses
from rollout.openai.sleep_routes import add_sleep_routes
from rollout.openai.streaming.choice_stream import StreamMismatchError
from rollout.openai.streaming.sse import sse, stream_chunks
from rollout.server.loop_errors import LoopError
from rollout.server.metrics import Metrics
from rollout.structured_outputs.compile_pool import CompilersBusyError

CLIENT_CLOSED = 499  # nginx's code for a client that went away before the answer


def build_app(frontend: Frontend, metrics: Metrics, token: str | None, max_body_bytes: int) -> Any:
    app = FastAPI(title="rollout", docs_url=None, redoc_url=None, openapi_url=None)
    _error_handlers(app)

    @app.get("/health")
    async def health() -> Response:
        ok = frontend.loop.accepting
        return JSONResponse({"status": "ok" if ok else "unavailable"}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(await frontend.run(metrics.render), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """One card per served name (vLLM lists every --served-model-name), the first first."""
        card = {
            "object": "model",
            "created": 0,
            "owned_by": "rollout",
            "max_model_len": frontend.loop.engine.max_model_len,
            "weight_version": int(frontend.loop.stats()["weight_version"]),
        }
        return {"object": "list", "data": [{"id": name} | card for name in frontend.served.names]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatCompletionRequest, request: Request) -> Response:
        return await _generate(frontend, req, request, "chatcmpl", write_chat)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Response:
        return await _generate(frontend, req, request, "cmpl", write_completion)

    register_responses(app, frontend)  # /v1/responses (responses_routes.py)
    add_sleep_routes(app, frontend)  # vLLM's /sleep, /wake_up, /is_sleeping
    return Guard(app, token, max_body_bytes)


async def _generate(
    frontend: Frontend,
    req: ChatCompletionRequest | CompletionRequest,
    request: Request,
    prefix: str,
    write: WriteChoice,
) -> Response:
    caller = caller_of(request, req.user)
    release = frontend.gate.enter(caller)  # 503 while draining, 429 past the bound or the caller's share
    streaming = False
    try:
        request_id, prepared, handle = await frontend.submit(req, prefix, caller)
        chat = prefix == "chatcmpl"
        counted: list[int] = []
        if req.stream:
            head = frontend.head(request_id, "chat.completion.chunk" if chat else "text_completion")
            include_usage = req.stream_options is not None and req.stream_options.include_usage
            body = stream_chunks(
                head,
                prompt_fields(prepared),
                _opening(prepared, chat),
                frontend.deltas(handle, prepared, chat, counted),
                (lambda: usage_of(prepared, counted, handle)) if include_usage else None,
            )
            streaming = True  # the response releases the slot when it ends
            return ReleasingStreamingResponse(
                _errors_as_events(body), release, media_type="text/event-stream"
            )
        choices = await frontend.collect(handle, prepared, write, request.is_disconnected, counted)
    finally:
        if not streaming:
            release()
    if choices is None:
        return Response(status_code=CLIENT_CLOSED)
    head = frontend.head(request_id, "chat.completion" if chat else "text_completion")
    return JSONResponse(
        head | prompt_fields(prepared) | {"choices": choices, "usage": usage_of(prepared, counted, handle)}
    )


def _opening(prepared: Any, chat: bool) -> list[dict[str, Any]]:
    """The first chunk's choices: each chat choice's role (completions open with their first text)."""
    count = len(prepared.submissions) * prepared.n
    if not chat:
        return []
    return [
        {"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        for i in range(count)
    ]


async def _errors_as_events(body: Any) -> Any:
    """An error after the stream started is sent as an `error` event, then [DONE] (as vLLM does)."""
    try:
        async for chunk in body:
            yield chunk
    except (ValueError, LoopError, StreamMismatchError) as exc:
        yield sse(status_of(exc)[1])
        yield sse("[DONE]")


def _error_handlers(app: FastAPI) -> None:
    async def known(request: Request, exc: Exception) -> Response:
        status, body = status_of(exc)
        after = getattr(exc, "retry_after_s", None)  # admission refusals, busy grammar compilers
        retry = {"Retry-After": str(after)} if after is not None else None
        return JSONResponse(body, status_code=status, headers=retry)

    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        message, param = validation_message(list(exc.errors()))
        return JSONResponse(error_body(message, "BadRequestError", 400, param), status_code=400)

    for kind in (ValueError, LoopError, ModelNotFoundError, CompilersBusyError):
        app.add_exception_handler(kind, known)
    app.add_exception_handler(RequestValidationError, invalid)
