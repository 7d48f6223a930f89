"""ResponseStore: the responses kept for `previous_response_id` and `GET /v1/responses/{id}`, in memory.

Bounded: past `capacity` responses the least recently used goes (its id is then unknown: 404, as for an
id never stored). Each keeps the Response object, the conversation that continues from it (its chat
messages, the reply included, without the instructions) and its exact tokens (prompt + completion), so
a request naming it continues token-in: the prefix the model saw is kept, never re-rendered. Nothing
survives a restart. Thread-safe (the front end's worker threads and the asyncio thread use it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_CAPACITY = 1024


class ResponseNotFoundError(LookupError):
    """A response id this server does not hold (never stored, `store: false`, or evicted): 404."""


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    messages: list[dict[str, Any]]  # the conversation so far, ending with the reply (chat messages)
    instructions: str | None
    token_ids: list[int]  # prompt + completion: what the next turn's prompt starts with


class ResponseStore:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"response store capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, response_id: str, stored: StoredResponse) -> None:
        with self._lock:
            self._items[response_id] = stored
            self._items.move_to_end(response_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get(self, response_id: str, field: str = "previous_response_id") -> StoredResponse:
        with self._lock:
            stored = self._items.get(response_id)
            if stored is None:
                raise ResponseNotFoundError(
                    f"{field}: no stored response with id {response_id!r} (never stored, stored with "
                    f"store=false, or evicted: this server keeps the last {self.capacity})"
                )
            self._items.move_to_end(response_id)
            return stored

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
