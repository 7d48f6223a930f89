"""Frontend: one HTTP request's way through the engine loop, shared by both generate endpoints.

Prepare (tokenize, render, check) on a worker thread -> `EngineLoop.submit` (the gRPC server's
loop: same admission, fair share and weight version) -> wait for samples (or, streamed, for each
step's tokens) on a worker thread -> write the reply (or the chunks) on a worker thread. The asyncio thread never tokenizes and never blocks; the
engine loop's thread never sees any of it. A client that goes away cancels its requests.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from rollout.detokenize.finish_text import finish_text
from rollout.multimodal.image_parts import ImageLimits
from rollout.openai.admission_gate import Gate
from rollout.openai.replies.response_objects import ReplyOptions, chat_choice, completion_choice, usage
from rollout.openai.requests.prepare import Prepared, Preparer
from rollout.openai.requests.schemas import ChatCompletionRequest, CompletionRequest
from rollout.openai.requests.served_names import ServedNames
from rollout.openai.streaming.stream_deltas import StreamDeltas
from rollout.openai.tools.tool_parsers import PARSERS, parser_for_template
from rollout.outputs import CompletionOutput
from rollout.server.engine_loop import EngineLoop
from rollout.server.handle import HandleCancelledError, RequestHandle

T = TypeVar("T")
DISCONNECT_POLL_S = 0.5
WriteChoice = Callable[[CompletionOutput, int, ReplyOptions], dict[str, Any]]


class Frontend:
    """The engine loop as the OpenAI endpoints see it."""

    def __init__(
        self,
        loop: EngineLoop,
        tool_parser: str | None = None,
        max_open_requests: int = 256,
        served_model_names: Sequence[str] | None = None,
        image_limits: ImageLimits | None = None,
    ):
        engine = loop.engine
        template = getattr(engine.tokenizer, "chat_template", None)
        parser = tool_parser or parser_for_template(template if isinstance(template, str) else None)
        if parser not in PARSERS:
            raise ValueError(f"tool_call_parser must be one of {sorted(PARSERS)}, got {parser!r}")
        self.loop = loop
        self.served = ServedNames.of(served_model_names, engine.model_info.name)
        self.tool_parser = parser
        self.preparer = Preparer(engine, self.served, parser, loop.max_pending_requests, image_limits)
        # Each open request waits for its samples on one of these threads, as a gRPC call holds one;
        # the gate bounds open requests to their number (admission_gate.py), the 8 more prepare and write.
        self.executor = ThreadPoolExecutor(max_open_requests + 8, "rollout-openai")
        self.gate = Gate(loop, max_open_requests)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def submit(
        self, req: ChatCompletionRequest | CompletionRequest, prefix: str, caller: str
    ) -> tuple[str, Prepared, RequestHandle]:
        """Prepares and submits one request of `caller` (admission_gate.http_caller)."""
        request_id = f"{prefix}-{uuid.uuid4().hex}"
        prepare = self.preparer.chat if isinstance(req, ChatCompletionRequest) else self.preparer.completion
        prepared = await self.run(prepare, req, request_id, caller)
        handle = await self.run(self.loop.submit, prepared.submissions)
        return request_id, prepared, handle

    async def choices(
        self, handle: RequestHandle, prepared: Prepared, write: WriteChoice, counted: list[int]
    ) -> AsyncIterator[dict[str, Any]]:
        """Each choice as its sample finishes, written on a worker thread; cancels the handle on exit.

        Appends each sample's number of tokens to `counted` (the usage)."""
        position = {r: i for i, r in enumerate(handle.request_ids)}
        try:
            while not handle.done:
                event = await self.run(handle.next_event)
                sub = handle.submissions[event.request_id]
                for sample in event.samples:
                    index = position[event.request_id] * prepared.n + sample.index
                    # text and the cut at a stop string, as the gRPC servicer does (detokenize/finish_text.py)
                    sample = await self.run(
                        finish_text, sample, prepared.opts.tokenizer, sub.prompt_token_ids, sub.params
                    )
                    counted.append(len(sample.token_ids))
                    yield await self.run(write, sample, index, prepared.opts)
        finally:
            handle.cancel()

    async def deltas(
        self, handle: RequestHandle, prepared: Prepared, chat: bool, counted: list[int]
    ) -> AsyncIterator[dict[str, Any]]:
        """Each choice's chunk choices as its tokens are sampled, made on a worker thread
        (stream_deltas.py); cancels the handle on exit. Appends each sample's length to `counted`."""
        stream = StreamDeltas(handle, prepared, chat, counted)
        try:
            while not handle.done:
                for choice in await self.run(stream.next_choices):
                    yield choice
        finally:
            handle.cancel()

    async def collect(
        self,
        handle: RequestHandle,
        prepared: Prepared,
        write: WriteChoice,
        disconnected: Callable,
        counted: list[int],
    ) -> list[dict[str, Any]] | None:
        """Every choice in index order; None when the client went away first (its requests are aborted)."""
        watcher = asyncio.create_task(_cancel_on_disconnect(handle, disconnected))
        try:
            return sorted(
                [c async for c in self.choices(handle, prepared, write, counted)], key=lambda c: c["index"]
            )
        except HandleCancelledError:
            return None
        finally:
            watcher.cancel()

    def head(self, request_id: str, kind: str) -> dict[str, Any]:
        return {"id": request_id, "object": kind, "created": int(time.time()), "model": self.served.primary}

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


async def _cancel_on_disconnect(handle: RequestHandle, disconnected: Callable) -> None:
    while True:
        await asyncio.sleep(DISCONNECT_POLL_S)
        if await disconnected():
            handle.cancel()
            return


def write_chat(sample: CompletionOutput, index: int, opts: ReplyOptions) -> dict[str, Any]:
    return chat_choice(sample, index, opts)


def write_completion(sample: CompletionOutput, index: int, opts: ReplyOptions) -> dict[str, Any]:
    return completion_choice(sample, index, opts)


def prompt_fields(prepared: Prepared) -> dict[str, Any]:
    """`prompt_token_ids` (left out with `return_token_ids: false`): one list for a single prompt
    (chat), a list per prompt otherwise; and the request's extension fields (`prefix_stable`,
    `prefix_break`)."""
    if not prepared.opts.token_ids:
        return dict(prepared.extensions)
    ids = [list(s.prompt_token_ids) for s in prepared.submissions]
    return {"prompt_token_ids": ids[0] if len(ids) == 1 else ids} | prepared.extensions


def usage_of(prepared: Prepared, counted: list[int], handle: RequestHandle) -> dict[str, Any]:
    """OpenAI's usage; `prompt_tokens_details.cached_tokens`: the prompts' prefix-cache hits (vLLM's)."""
    cached = sum(handle.num_cached_tokens.values())
    return usage([len(s.prompt_token_ids) for s in prepared.submissions], sum(counted), cached)
