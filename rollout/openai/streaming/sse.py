"""Server-sent events for `stream: true`: OpenAI's chunk objects, then `data: [DONE]`.

Token by token, as vLLM streams: a chat opens with a chunk per choice with the role, then each
choice's text and logprobs arrive as its tokens are sampled (stream_deltas.py), and its final chunk
carries the rest, tool calls, `finish_reason` and rollout's `token_ids` / `weight_version(s)`. A
client that drops the stream cancels its requests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

Chunk = dict[str, Any]


def sse(data: Chunk | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def stream_chunks(
    head: Chunk,
    first: Chunk,
    first_choices: list[dict[str, Any]],
    choices: AsyncIterator[dict[str, Any]],
    usage: Callable[[], dict[str, int]] | None,
) -> AsyncIterator[bytes]:
    """`head` (id, object, created, model) on every chunk, `first` (the prompt's fields) on the first
    only (a prompt's ids on every token's chunk would cost its length per token): the opening
    choices, a chunk per choice delta, the usage chunk when asked, then [DONE]."""
    if first_choices:
        yield sse(head | first | {"choices": first_choices})
        first = {}
    async for choice in choices:
        yield sse(head | first | {"choices": [choice]})
        first = {}
    if usage is not None:
        yield sse(head | {"choices": [], "usage": usage()})
    yield sse("[DONE]")
