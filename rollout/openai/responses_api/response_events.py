"""ResponseEvents: a streamed chat choice's chunks -> the Responses API's stream events, in OpenAI's order.

`response.created`, `response.in_progress`; the message item opens (`output_item.added`,
`content_part.added`) with the first text and each chunk's text is an `output_text.delta` (with the
logprob entries of the tokens sampled since the last delta, when asked); at the end the text, part and
item are closed (`output_text.done` holds the whole text and every entry), each tool call is an item
with its arguments in one `function_call_arguments.delta`, and `response.completed` (or
`response.incomplete`) carries the whole Response, equal to the non-streamed one. The text deltas come
from chat's streaming (streaming/choice_stream.py), so they hold back what a tool parser may still take.
"""

from __future__ import annotations

from typing import Any

from rollout.openai.responses_api.response_object import (
    Reply,
    call_item,
    call_item_id,
    message_id,
    message_item,
)

Event = dict[str, Any]


class ResponseEvents:
    """`opening()`, then `push(chunk_choice)` per chat chunk choice, then `closing(response)`; `reply()`
    is the streamed reply once the final chunk came."""

    def __init__(self, head: dict[str, Any], logprobs: bool) -> None:
        self.head, self.logprobs = head, logprobs
        self.sequence = 0
        self.item_id = message_id(head["id"])
        self.opened = False  # the message item
        self.texts: list[str] = []
        self.entries: list[dict[str, Any]] = []
        self.pending: list[dict[str, Any]] = []  # entries not yet sent with a delta
        self.final: dict[str, Any] | None = None

    def opening(self) -> list[Event]:
        return [
            self.event("response.created", response=self.head),
            self.event("response.in_progress", response=self.head),
        ]

    def push(self, choice: dict[str, Any]) -> list[Event]:
        entries = (choice.get("logprobs") or {}).get("content") or []
        self.entries += entries
        self.pending += entries
        piece = (choice.get("delta") or {}).get("content") or ""
        if choice.get("finish_reason") is not None:
            self.final = choice
        if not piece:
            return []
        events = self._open()
        self.texts.append(piece)
        delta = {"item_id": self.item_id, "output_index": 0, "content_index": 0, "delta": piece}
        events.append(self.event("response.output_text.delta", **delta, logprobs=self.pending))
        self.pending = []
        return events

    def reply(self) -> Reply:
        final = self.final
        assert final is not None, "the stream ended before its final chunk"
        calls = [
            {k: v for k, v in call.items() if k != "index"} for call in final["delta"].get("tool_calls") or []
        ]
        text = "".join(self.texts)
        content = text if text or not calls else None  # chat's rule: a reply of calls only has no content
        return Reply(
            content,
            calls,
            final["finish_reason"],
            self.entries if self.logprobs else None,
            final["token_ids"],
            final["weight_version"],
            final["weight_versions"],
            final.get("logprobs_mode"),
        )

    def closing(self, response: dict[str, Any]) -> list[Event]:
        """The items' closing events and the final one, for the finished `response` (response_object.py)."""
        reply = self.reply()
        events: list[Event] = []
        if reply.content is not None:
            events += self._open() + self._close_message(reply)
        first = 1 if reply.content is not None else 0
        for i, call in enumerate(reply.tool_calls):
            events += self._call_events(call, call_item_id(self.head["id"], i), first + i)
        kind = "response.completed" if response["status"] == "completed" else f"response.{response['status']}"
        if response["status"] == "cancelled":
            kind = "response.failed"
        events.append(self.event(kind, response=response))
        return events

    def _open(self) -> list[Event]:
        if self.opened:
            return []
        self.opened = True
        item = {
            "id": self.item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        return [
            self.event("response.output_item.added", output_index=0, item=item),
            self.event("response.content_part.added", **where, part=part),
        ]

    def _close_message(self, reply: Reply) -> list[Event]:
        item = message_item(reply, self.item_id)
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        return [
            self.event(
                "response.output_text.done", **where, text=reply.content, logprobs=reply.logprobs or []
            ),
            self.event("response.content_part.done", **where, part=item["content"][0]),
            self.event("response.output_item.done", output_index=0, item=item),
        ]

    def _call_events(self, call: dict[str, Any], item_id: str, index: int) -> list[Event]:
        done = call_item(call, item_id)
        added = done | {"arguments": "", "status": "in_progress"}
        where = {"item_id": item_id, "output_index": index}
        return [
            self.event("response.output_item.added", output_index=index, item=added),
            self.event("response.function_call_arguments.delta", **where, delta=done["arguments"]),
            self.event(
                "response.function_call_arguments.done",
                **where,
                arguments=done["arguments"],
                name=done["name"],
            ),
            self.event("response.output_item.done", output_index=index, item=done),
        ]

    def event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event
