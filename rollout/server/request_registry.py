"""RequestRegistry: the engine loop's requests by id, with their callers, and a cache of finished ones.

Request ids are idempotency keys: a retry of an unfinished request attaches to it, a retry of a
finished one replays its cached result, and an id reused with another prompt is refused. The
registry holds that bookkeeping; it is not thread-safe: the `EngineLoop` calls it under its lock.
"""

from __future__ import annotations

import queue
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from rollout.engine.output.token_stream import TokenDelta
from rollout.outputs import CompletionOutput, RequestOutput
from rollout.server.admission import OverShareError, ServerFullError, share_refusal, too_many_prompts
from rollout.server.handle import LoopEvent, Submission
from rollout.server.loop_errors import EngineStepError, RequestConflictError

COUNTERS = ("accepted", "finished", "failed", "rejected_full", "rejected_unavailable", "deduplicated")


@dataclass(slots=True, eq=False)
class Tracked:
    """A request the loop accepted: queued (`in_engine` False) or in the engine, or finished (cache)."""

    sub: Submission
    samples: list[CompletionOutput] = field(default_factory=list)
    sinks: list[queue.SimpleQueue[LoopEvent]] = field(default_factory=list)
    in_engine: bool = False
    orphaned: bool = False  # every caller went away: aborted, and not cached (a retry regenerates)
    prompt_logprobs: list[dict[int, float] | None] | None = None  # once the engine sent them
    num_cached_tokens: int | None = None  # prefix-cache hits, once the engine scheduled it

    @property
    def request_id(self) -> str:
        return self.sub.request_id

    @property
    def caller(self) -> str:
        return self.sub.caller

    @property
    def num_samples(self) -> int:
        """Samples still to finish (all n until it is done)."""
        return self.sub.params.n - len(self.samples)

    def output(self) -> RequestOutput:
        samples = sorted(self.samples, key=lambda c: c.index)
        sub = self.sub
        return RequestOutput(
            sub.request_id,
            list(sub.prompt_token_ids),
            samples,
            True,
            sub.prompt,
            self.prompt_logprobs,
            self.num_cached_tokens,
        )


class RequestRegistry:
    """Unfinished requests (`unfinished`) and the last `finished_cache_size` finished ones."""

    def __init__(self, finished_cache_size: int = 4096) -> None:
        self.finished_cache_size = finished_cache_size
        self.unfinished: dict[str, Tracked] = {}
        self.finished: OrderedDict[str, Tracked] = OrderedDict()
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.by_caller: Counter[str] = Counter()  # unfinished requests per caller (admission.py's share)

    def check(self, submissions: list[Submission], max_pending: int) -> None:
        """Raises (nothing registered) for a call that repeats an id, overfills, or reuses an id."""
        new = [
            s
            for s in submissions
            if s.request_id not in self.unfinished and s.request_id not in self.finished
        ]
        if len({s.request_id for s in submissions}) != len(submissions):
            raise ValueError("request_id: the same request id appears twice in one call")
        if len(new) > max_pending:
            raise ValueError(too_many_prompts(len(new), max_pending))
        if len(self.unfinished) + len(new) > max_pending:
            self.counters["rejected_full"] += 1
            raise ServerFullError(
                f"admission queue full: {len(self.unfinished)} unfinished requests, limit {max_pending}"
            )
        if new:
            what, flag = "unfinished requests", "max_pending_requests"
            refusal = share_refusal(max_pending, self.by_caller, new[0].caller, len(new), what, flag)
            if refusal is not None:
                self.counters["rejected_full"] += 1
                raise OverShareError(refusal)
        for sub in submissions:
            known = self.unfinished.get(sub.request_id) or self.finished.get(sub.request_id)
            if known is not None and (
                known.sub.prompt_token_ids != sub.prompt_token_ids
                or known.sub.params != sub.params
                or _image_hashes(known.sub) != _image_hashes(sub)  # the same text with other images
            ):
                raise RequestConflictError(
                    f"request_id {sub.request_id!r} was already used with a different prompt or sampling params"
                )

    def attach(
        self, sub: Submission, sink: queue.SimpleQueue[LoopEvent], aborts: list[str]
    ) -> Tracked | None:
        """Attaches `sink` to the request; returns a new Tracked the loop must queue, else None.

        A finished request replays at once; an unfinished one sends what it has so far. A retry that
        arrives while its orphaned request's abort is still pending keeps the request (removed from `aborts`).
        """
        done = self.finished.get(sub.request_id)
        if done is not None:
            self.finished.move_to_end(sub.request_id)
            self.counters["deduplicated"] += 1
            done_output = done.output()
            sink.put(
                LoopEvent(
                    sub.request_id,
                    done_output.outputs,
                    True,
                    prompt_logprobs=done_output.prompt_logprobs,
                    num_cached_tokens=done_output.num_cached_tokens,
                )
            )
            return None
        tracked = self.unfinished.get(sub.request_id)
        new = tracked is None
        if tracked is None:
            tracked = self.unfinished[sub.request_id] = Tracked(sub)
            self.by_caller[sub.caller] += 1
            self.counters["accepted"] += 1
        else:
            self.counters["deduplicated"] += 1
            if tracked.orphaned and sub.request_id in aborts:  # a retry beat the abort: keep it
                aborts.remove(sub.request_id)
                tracked.orphaned = False
            if tracked.samples:
                sink.put(
                    LoopEvent(
                        sub.request_id,
                        list(tracked.samples),
                        prompt_logprobs=tracked.prompt_logprobs,
                        num_cached_tokens=tracked.num_cached_tokens,
                    )
                )
        tracked.sinks.append(sink)
        return tracked if new else None

    def detach(self, request_id: str, sink: queue.SimpleQueue[LoopEvent]) -> Tracked | None:
        """Removes a caller's sink; returns the request when nobody is left waiting (to abort it)."""
        tracked = self.unfinished.get(request_id)
        if tracked is None or sink not in tracked.sinks:
            return None
        tracked.sinks.remove(sink)
        if tracked.sinks:
            return None
        tracked.orphaned = True
        return tracked

    def deliver(
        self,
        tracked: Tracked,
        samples: list[CompletionOutput],
        finished: bool,
        prompt_logprobs: list[dict[int, float] | None] | None = None,
        num_cached_tokens: int | None = None,
    ) -> None:
        """Sends samples to every caller; a finished request moves to the cache (unless orphaned)."""
        request_id = tracked.request_id
        tracked.samples.extend(samples)
        tracked.prompt_logprobs = tracked.prompt_logprobs or prompt_logprobs
        if tracked.num_cached_tokens is None:
            tracked.num_cached_tokens = num_cached_tokens
        for sink in tracked.sinks:
            event = LoopEvent(request_id, list(samples), finished, prompt_logprobs=tracked.prompt_logprobs)
            event.num_cached_tokens = tracked.num_cached_tokens
            sink.put(event)
        if not finished:
            return
        del self.unfinished[request_id]
        self._forget_caller(tracked)
        self.counters["finished"] += 1
        if not tracked.orphaned:
            self.finished[request_id] = tracked
            while len(self.finished) > self.finished_cache_size:
                self.finished.popitem(last=False)

    def deliver_tokens(self, tokens: list[TokenDelta]) -> None:
        """Sends one step's streamed tokens to the callers of their requests, an event per request."""
        by_request: dict[str, list[TokenDelta]] = {}
        for token in tokens:
            by_request.setdefault(token.request_id, []).append(token)
        for request_id, group in by_request.items():
            tracked = self.unfinished.get(request_id)
            for sink in tracked.sinks if tracked is not None else ():
                sink.put(LoopEvent(request_id, tokens=group))

    def fail(self, request_ids: list[str], error: EngineStepError) -> None:
        """Ends each request with `error` for its callers; nothing of it is cached."""
        for request_id in request_ids:
            tracked = self.unfinished.pop(request_id, None)
            if tracked is None:
                continue
            self._forget_caller(tracked)
            self.counters["failed"] += 1
            for sink in tracked.sinks:
                sink.put(LoopEvent(request_id, [], finished=True, error=error))

    def _forget_caller(self, tracked: Tracked) -> None:
        self.by_caller[tracked.caller] -= 1
        if self.by_caller[tracked.caller] <= 0:
            del self.by_caller[tracked.caller]

    def in_engine(self) -> list[str]:
        return [r for r, t in self.unfinished.items() if t.in_engine]


def _image_hashes(sub: Submission) -> tuple[str, ...]:
    return sub.multi_modal.image_hashes if sub.multi_modal is not None else ()
