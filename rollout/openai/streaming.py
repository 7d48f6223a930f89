"""Server-sent events for `stream: true`: OpenAI's chunk objects, then `data: [DONE]`.

The engine loop hands a sample over when it finishes, so each choice's text arrives as one chunk
when that choice finishes (after a first chunk per choice with the role); the token ids, logprobs
and weight version travel in that chunk. A client that drops the stream cancels its requests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

Chunk = dict[str, Any]


def sse(data: Chunk | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def chat_delta(choice: dict[str, Any]) -> dict[str, Any]:
    """A finished chat choice as its stream delta (the message becomes `delta`; tool calls get indexes)."""
    delta = {"content": choice["message"]["content"]}
    calls = choice["message"].get("tool_calls")
    if calls:
        delta["tool_calls"] = [call | {"index": i} for i, call in enumerate(calls)]
    rest = {k: v for k, v in choice.items() if k != "message"}
    return rest | {"delta": delta}


async def stream_chunks(
    head: Chunk,
    first_choices: list[dict[str, Any]],
    choices: AsyncIterator[dict[str, Any]],
    usage: Callable[[], dict[str, int]] | None,
) -> AsyncIterator[bytes]:
    """`head` (id, object, created, model) on every chunk: the opening choices, one chunk per finished
    choice, the usage chunk when asked, then [DONE]."""
    if first_choices:
        yield sse(head | {"choices": first_choices})
    async for choice in choices:
        yield sse(head | {"choices": [choice]})
    if usage is not None:
        yield sse(head | {"choices": [], "usage": usage()})
    yield sse("[DONE]")
