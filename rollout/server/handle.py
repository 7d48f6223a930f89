"""RequestHandle: how an RPC thread reads the finished samples of the requests it submitted.

The loop thread puts `LoopEvent`s on the handle's queue; the caller iterates them, or waits for the
whole result. A submission with `stream=True` also gets an event per step with its samples' new
tokens (`LoopEvent.tokens`, no samples); other callers only ever see finished samples. `cancel()`
(client gone) detaches the caller; the loop aborts a request once no caller is attached, so a
retry that attached meanwhile keeps it alive.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rollout.outputs import CompletionOutput, RequestOutput
from rollout.sampling_params import SamplingParams

if TYPE_CHECKING:
    from rollout.engine.output.token_stream import TokenDelta
    from rollout.multimodal.mm_inputs import MultiModalInputs
    from rollout.outputs import PartialSample


class HandleCancelledError(Exception):
    """The handle was cancelled while its caller was waiting."""


@dataclass(frozen=True, slots=True)
class Submission:
    """One prompt to generate; `request_id` is also the idempotency key.

    `caller` names who sent it (the server uses the client's connection); the engine loop shares
    admission fairly between callers. `stream`: the request's new tokens are sent each step too.
    """

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    prompt: str | None = None
    resume: PartialSample | None = None  # continue this partial sample (rollout/engine/versions/resume.py)
    caller: str = ""
    stream: bool = False
    multi_modal: MultiModalInputs | None = None  # its images, processed off the loop (rollout/multimodal/)


@dataclass(slots=True)
class LoopEvent:
    """Samples of one request that finished since the last event; `finished` once all n are out.

    For a streamed request, also events with only `tokens`: what its unfinished samples sampled in
    one step (engine/output/token_stream.py); each sample's tokens arrive before the sample itself.
    """

    request_id: str
    samples: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False
    error: Exception | None = None
    prompt_logprobs: list[dict[int, float] | None] | None = None  # with the first samples, when asked for
    tokens: list[TokenDelta] = field(default_factory=list)
    num_cached_tokens: int | None = None  # the prompt's prefix-cache hits, with its samples


Detach = Callable[[str, "queue.SimpleQueue[LoopEvent]"], None]


class RequestHandle:
    """The requests of one submit call; iterate for events as samples finish, or call `result()`.

    `detach(request_id, sink)` is how a cancelled handle lets go of a request (the engine loop's, which
    aborts it once nobody waits on it); the handle knows nothing else of the loop.
    """

    def __init__(self, detach: Detach, submissions: list[Submission], sink: queue.SimpleQueue[LoopEvent]):
        self._detach = detach
        self.submissions = {s.request_id: s for s in submissions}
        self.request_ids = [s.request_id for s in submissions]
        self._sink = sink
        self._unfinished = set(self.request_ids)
        self._cancelled = False
        # Each request's prefix-cache hits, as its events bring them (usage's cached_tokens).
        self.num_cached_tokens: dict[str, int] = {}

    @property
    def done(self) -> bool:
        return not self._unfinished

    def __iter__(self) -> Iterator[LoopEvent]:
        while self._unfinished:
            yield self.next_event()

    def next_event(self, timeout: float | None = None) -> LoopEvent:
        """The next event; raises the request's LoopError if it failed, queue.Empty on timeout."""
        event = self._sink.get(timeout=timeout)
        if self._cancelled:
            raise HandleCancelledError("the request handle was cancelled")
        if event.finished:
            self._unfinished.discard(event.request_id)
        if event.num_cached_tokens is not None:
            self.num_cached_tokens[event.request_id] = event.num_cached_tokens
        if event.error is not None:
            self.cancel()
            raise event.error
        return event

    def result(self, timeout: float | None = None) -> list[RequestOutput]:
        """Waits for every request; RequestOutputs in submit order, samples in index order."""
        samples: dict[str, list[CompletionOutput]] = {r: [] for r in self.request_ids}
        prompt_logprobs: dict[str, list[dict[int, float] | None] | None] = {}
        while self._unfinished:
            event = self.next_event(timeout)
            samples[event.request_id].extend(event.samples)
            if event.prompt_logprobs is not None:
                prompt_logprobs[event.request_id] = event.prompt_logprobs
        return [self._output(r, s, prompt_logprobs.get(r)) for r, s in samples.items()]

    def _output(
        self, request_id: str, samples: list[CompletionOutput], prompt_logprobs: list | None
    ) -> RequestOutput:
        sub = self.submissions[request_id]
        samples.sort(key=lambda c: c.index)
        cached = self.num_cached_tokens.get(request_id)
        return RequestOutput(
            request_id, list(sub.prompt_token_ids), samples, True, sub.prompt, prompt_logprobs, cached
        )

    def cancel(self) -> None:
        """Detaches from every unfinished request (they are aborted if nobody else waits on them)."""
        if self._cancelled:
            return
        self._cancelled = True
        for request_id in list(self._unfinished):
            self._detach(request_id, self._sink)
        self._sink.put(LoopEvent(""))  # wakes a caller blocked in next_event
