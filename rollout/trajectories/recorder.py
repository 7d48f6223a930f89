"""TrajectoryRecorder: token-exact trajectories from any agent framework, captured at the HTTP layer.

Frameworks (LangGraph on langchain-openai, the OpenAI Agents SDK) hand user code text, never our token
ids; so the recorder sits under their `openai` client as its httpx transport and keeps, per episode,
every reply's prompt and completion token ids, logprobs and weight versions (turn.py), each turn checked
for prefix stability as it arrives (episode.py). Which episode a reply belongs to: the `X-Rollout-Episode`
header when the request carries one, else the `recorder.episode()` block the call runs in (a context
variable: asyncio tasks started inside it inherit it), else the episode "default".

    recorder = TrajectoryRecorder()
    client = recorder.wrap(openai.OpenAI(base_url=..., api_key=...))    # or AsyncOpenAI
    with recorder.episode("e1") as episode:
        run_agent(client)                                              # any framework on that client
    batch = trl_batch([episode])                                       # a TRL rollout_func's return value
"""

from __future__ import annotations

import inspect
import itertools
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpx

from rollout.trajectories.episode import Episode
from rollout.trajectories.recording_transport import AsyncRecordingTransport, RecordingTransport
from rollout.trajectories.stream_capture import chat_body, events, response_body
from rollout.trajectories.turn import chat_turns, response_turns

EPISODE_HEADER = "x-rollout-episode"
logger = logging.getLogger(__name__)
_ids = itertools.count()


class TrajectoryRecorder:
    """`ask_logprobs` (default): requests that do not say get the sampled tokens' logprobs asked for."""

    def __init__(self, ask_logprobs: bool = True) -> None:
        self.ask_logprobs = ask_logprobs
        self.episodes: dict[str, Episode] = {}
        self.errors: list[str] = []  # replies that could not be recorded, and why
        self._current: ContextVar[Episode | None] = ContextVar(f"rollout-episode-{next(_ids)}", default=None)
        self._lock = threading.Lock()

    @contextmanager
    def episode(self, name: str | None = None) -> Iterator[Episode]:
        """Replies to calls made inside the block (and tasks started in it) go to this episode."""
        episode = self.get(name if name is not None else f"episode-{len(self.episodes)}")
        token = self._current.set(episode)
        try:
            yield episode
        finally:
            self._current.reset(token)

    def get(self, name: str) -> Episode:
        with self._lock:
            return self.episodes.setdefault(name, Episode(name))

    def http_client(self, transport: httpx.BaseTransport | None = None, **kwargs: Any) -> httpx.Client:
        """An httpx client recording through `transport` (httpx's default one unless given)."""
        inner = transport or httpx.HTTPTransport()
        return httpx.Client(
            transport=RecordingTransport(inner, self._on_request, self.ask_logprobs), **kwargs
        )

    def async_http_client(
        self, transport: httpx.AsyncBaseTransport | None = None, **kwargs: Any
    ) -> httpx.AsyncClient:
        inner = transport or httpx.AsyncHTTPTransport()
        return httpx.AsyncClient(
            transport=AsyncRecordingTransport(inner, self._on_request, self.ask_logprobs), **kwargs
        )

    def wrap(self, client: Any) -> Any:
        """A copy of an `openai.OpenAI` or `AsyncOpenAI` client whose requests are recorded (same base URL,
        key, timeout and retries; TLS settings: pass `http_client(transport=httpx.HTTPTransport(verify=...))`
        to the client yourself)."""
        asynchronous = inspect.iscoroutinefunction(client.post)
        http = self.async_http_client() if asynchronous else self.http_client()
        return client.with_options(http_client=http)

    def _on_request(self, endpoint: str, request: httpx.Request) -> Any:
        """Where the reply to `request` goes: its episode, found now (a stream may be read elsewhere)."""
        episode = self._episode_of(request)
        return lambda raw, streamed: self._record(episode, endpoint, request, raw, streamed)

    def _record(
        self, episode: Episode, endpoint: str, request: httpx.Request, raw: bytes, streamed: bool
    ) -> None:
        try:
            body = _body(endpoint, raw, streamed)
            turns = [] if body is None else (chat_turns if endpoint == "chat" else response_turns)(body)
        except (ValueError, KeyError, TypeError) as exc:
            turns, body = [], None
            self._error(f"{request.url.path}: the reply could not be read ({exc})")
        if not turns and body is not None:
            self._error(
                f"{request.url.path}: the reply has no token ids (return_token_ids: false, or not rollout)"
            )
        episode.add(turns)

    def _episode_of(self, request: httpx.Request) -> Episode:
        named = request.headers.get(EPISODE_HEADER)
        if named:
            return self.get(named)
        return self._current.get() or self.get("default")

    def _error(self, message: str) -> None:
        logger.warning("trajectory recorder: %s", message)
        self.errors.append(message)


def _body(endpoint: str, raw: bytes, streamed: bool) -> dict[str, Any] | None:
    if not streamed:
        return json.loads(raw)
    payloads = events(raw)
    return chat_body(payloads) if endpoint == "chat" else response_body(payloads)
