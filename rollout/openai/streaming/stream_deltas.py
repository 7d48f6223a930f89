"""StreamDeltas: a streamed request's loop events -> chunk choices, as tokens are sampled.

The engine loop sends a streamed request's new tokens after each step and each sample when it
finishes (server/handle.py); this turns them into each choice's deltas (choice_stream.py) on an
HTTP worker thread. Events already queued are taken together, so a reader that fell behind sends
one chunk per choice for all of them instead of one per step.
"""

from __future__ import annotations

import queue
from typing import Any

from rollout.engine.output.token_stream import TokenDelta
from rollout.openai.requests.prepare import Prepared
from rollout.openai.streaming.choice_stream import ChoiceStream
from rollout.outputs import CompletionOutput
from rollout.server.handle import LoopEvent, RequestHandle

Key = tuple[str, int]  # (request id, sample index)


class StreamDeltas:
    """`next_choices()` (one caller at a time) until `handle.done`; `counted` gets each sample's length."""

    def __init__(self, handle: RequestHandle, prepared: Prepared, chat: bool, counted: list[int]) -> None:
        self.handle, self.prepared, self.chat, self.counted = handle, prepared, chat, counted
        self.position = {r: i for i, r in enumerate(handle.request_ids)}
        self.streams: dict[Key, ChoiceStream] = {}

    def next_choices(self) -> list[dict[str, Any]]:
        """Waits for an event, takes those queued behind it, and returns their chunk choices in order
        per choice: one for its new tokens (when something can go out), then its final one."""
        pending: dict[Key, list[TokenDelta]] = {}
        choices: list[dict[str, Any]] = []
        for event in self._events():
            for token in event.tokens:
                pending.setdefault((event.request_id, token.sample_index), []).append(token)
            for sample in event.samples:
                key = (event.request_id, sample.index)
                choices += self._push(key, pending.pop(key, []))
                choices.append(self._finish(key, sample))
        for key, tokens in pending.items():
            choices += self._push(key, tokens)
        return choices

    def _events(self) -> list[LoopEvent]:
        events = [self.handle.next_event()]
        while not self.handle.done:
            try:
                events.append(self.handle.next_event(timeout=0))
            except queue.Empty:
                break
        return events

    def _push(self, key: Key, tokens: list[TokenDelta]) -> list[dict[str, Any]]:
        choice = self._stream(key).push(tokens) if tokens else None
        return [] if choice is None else [choice]

    def _finish(self, key: Key, sample: CompletionOutput) -> dict[str, Any]:
        stream = self._stream(key)
        sample = stream.complete(sample)
        self.counted.append(len(sample.token_ids))
        return stream.finish(sample)

    def _stream(self, key: Key) -> ChoiceStream:
        stream = self.streams.get(key)
        if stream is None:
            request_id, sample_index = key
            sub = self.handle.submissions[request_id]
            index = self.position[request_id] * self.prepared.n + sample_index
            stream = ChoiceStream(index, sub.prompt_token_ids, sub.params, self.prepared.opts, self.chat)
            self.streams[key] = stream
        return stream
