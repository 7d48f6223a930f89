"""EngineLoop: the one thread that owns the LLMEngine; every RPC of every client feeds it.

The engine is not thread-safe, so RPC threads never touch it: they submit requests (validated in the
caller's thread, queued under a lock) and read finished samples from a `RequestHandle`. The loop
thread admits queued requests, steps the engine and dispatches each finished sample, so all clients
share the same engine steps. Between steps it runs jobs on the engine, including exclusive ones
(weight updates) that need an idle engine.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from rollout.outputs import CompletionOutput, RequestOutput
from rollout.server.fair_share import FairShare
from rollout.server.handle import LoopEvent, RequestHandle, Submission
from rollout.server.loop_errors import (
    EngineStepError,
    NotAcceptingError,
    QueueFullError,
    RequestConflictError,
)
from rollout.server.loop_jobs import Job, run_job, wait_job

if TYPE_CHECKING:
    from rollout.engine.llm_engine import LLMEngine

T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class _Tracked:
    """A request the loop accepted: queued (`in_engine` False) or in the engine, or finished (cache)."""

    sub: Submission
    samples: list[CompletionOutput] = field(default_factory=list)
    sinks: list[queue.SimpleQueue[LoopEvent]] = field(default_factory=list)
    in_engine: bool = False
    orphaned: bool = False  # every caller went away: aborted, and not cached (a retry regenerates)

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
        return RequestOutput(sub.request_id, list(sub.prompt_token_ids), samples, True, sub.prompt)


class EngineLoop:
    """Owns `engine` on a background thread; thread-safe submit, abort, pause and exclusive jobs."""

    def __init__(
        self,
        engine: LLMEngine,
        max_pending_requests: int = 4096,
        finished_cache_size: int = 4096,
        fair_share: bool = True,
    ):
        self.engine = engine
        self.fair_share = fair_share  # False: every queued request enters the engine at once (FIFO)
        engine.detokenize = False  # the tokenizer never runs on the loop thread; RPC threads decode
        self.max_pending_requests = max_pending_requests
        self.finished_cache_size = finished_cache_size
        self._cond = threading.Condition()
        self._tracked: dict[str, _Tracked] = {}
        self._queued: FairShare[_Tracked] = FairShare()  # admission order: rollout/server/fair_share.py
        self._finished: OrderedDict[str, _Tracked] = OrderedDict()
        self._aborts: list[str] = []
        self._jobs: deque[Job] = deque()
        self._exclusive: deque[Job] = deque()
        self._paused = False
        self._draining = False
        self._stopped = False
        self._engine_busy = False
        self._stats: dict[str, int | float] = engine.stats()
        self.counters: dict[str, int] = dict.fromkeys(
            ("accepted", "finished", "failed", "rejected_full", "rejected_unavailable", "deduplicated"), 0
        )
        self._thread = threading.Thread(target=self._run, name="rollout-engine-loop", daemon=True)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> EngineLoop:
        """Starts the loop thread (once; later calls are no-ops)."""
        if not self._thread.is_alive() and not self._stopped:
            self._thread.start()
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stops admitting, lets unfinished requests finish for up to `grace` seconds, aborts the rest.

        `grace=None` waits for every unfinished request; queued requests of a paused loop never run,
        so pass a grace period when paused.
        """
        with self._cond:
            self._draining = True
            self._cond.wait_for(lambda: not self._tracked, timeout=grace)
            self._abort_all_locked(include_queued=True)
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._tracked, timeout=10.0)
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> EngineLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(grace=0.0)

    @property
    def accepting(self) -> bool:
        return not (self._paused or self._draining or self._stopped)

    # ---- requests -----------------------------------------------------------------------------

    def submit(self, submissions: list[Submission]) -> RequestHandle:
        """Queues every submission or none; events of all of them arrive on the returned handle.

        Raises ValueError (invalid input, naming the field), NotAcceptingError, QueueFullError or
        RequestConflictError. A known request id attaches to the running request, or replays its
        cached result: nothing is generated twice.
        """
        for sub in submissions:
            self.engine.validate_request(sub.prompt_token_ids, sub.params)
        sink: queue.SimpleQueue[LoopEvent] = queue.SimpleQueue()
        with self._cond:
            self._check_admission_locked(submissions)
            for sub in submissions:
                self._attach_or_queue_locked(sub, sink)
            self._cond.notify_all()
        return RequestHandle(self, submissions, sink)

    def _check_admission_locked(self, submissions: list[Submission]) -> None:
        if not self.accepting:
            self.counters["rejected_unavailable"] += 1
            state = "paused" if self._paused else "draining"
            raise NotAcceptingError(f"the server is {state} and not accepting requests")
        new = [
            s for s in submissions if s.request_id not in self._tracked and s.request_id not in self._finished
        ]
        if len({s.request_id for s in submissions}) != len(submissions):
            raise ValueError("request_id: the same request id appears twice in one call")
        if len(new) > self.max_pending_requests:
            raise ValueError(
                f"prompts: the call has {len(new)} new prompts, more than the server admits at once "
                f"(max_pending_requests {self.max_pending_requests}); split it into smaller calls"
            )
        if len(self._tracked) + len(new) > self.max_pending_requests:
            self.counters["rejected_full"] += 1
            raise QueueFullError(
                f"admission queue full: {len(self._tracked)} unfinished requests, limit {self.max_pending_requests}"
            )
        for sub in submissions:
            known = self._tracked.get(sub.request_id) or self._finished.get(sub.request_id)
            if known is not None and (
                known.sub.prompt_token_ids != sub.prompt_token_ids or known.sub.params != sub.params
            ):
                raise RequestConflictError(
                    f"request_id {sub.request_id!r} was already used with a different prompt or sampling params"
                )

    def _attach_or_queue_locked(self, sub: Submission, sink: queue.SimpleQueue[LoopEvent]) -> None:
        done = self._finished.get(sub.request_id)
        if done is not None:
            self._finished.move_to_end(sub.request_id)
            self.counters["deduplicated"] += 1
            sink.put(LoopEvent(sub.request_id, done.output().outputs, finished=True))
            return
        tracked = self._tracked.get(sub.request_id)
        if tracked is not None:
            self.counters["deduplicated"] += 1
            if tracked.orphaned and sub.request_id in self._aborts:  # a retry beat the abort: keep it
                self._aborts.remove(sub.request_id)
                tracked.orphaned = False
            if tracked.samples:
                sink.put(LoopEvent(sub.request_id, list(tracked.samples)))
        else:
            tracked = _Tracked(sub)
            self._tracked[sub.request_id] = tracked
            self._queued.append(tracked)
            self.counters["accepted"] += 1
        tracked.sinks.append(sink)

    def detach(self, request_id: str, sink: queue.SimpleQueue[LoopEvent]) -> None:
        """A caller went away; the request is aborted once no caller is attached to it."""
        with self._cond:
            tracked = self._tracked.get(request_id)
            if tracked is None or sink not in tracked.sinks:
                return
            tracked.sinks.remove(sink)
            if not tracked.sinks:
                tracked.orphaned = True
                self._abort_locked(tracked)
                self._cond.notify_all()

    def abort(self, request_id: str) -> bool:
        """Aborts an unfinished request; its unfinished samples finish with "abort". False if unknown."""
        with self._cond:
            tracked = self._tracked.get(request_id)
            if tracked is None:
                return False
            self._abort_locked(tracked)
            self._cond.notify_all()
            return True

    def _abort_locked(self, tracked: _Tracked) -> None:
        if tracked.in_engine:
            self._aborts.append(tracked.sub.request_id)
            return
        self._queued.remove(tracked)
        version = int(self._stats.get("weight_version", 0))
        samples = [
            CompletionOutput(i, [], None, None, "abort", version, None) for i in range(tracked.sub.params.n)
        ]
        self._deliver_locked(tracked, samples, finished=True)

    def _abort_all_locked(self, include_queued: bool) -> None:
        for tracked in list(self._tracked.values()):
            if include_queued or tracked.in_engine:
                self._abort_locked(tracked)

    # ---- control ------------------------------------------------------------------------------

    def call(self, fn: Callable[[LLMEngine], T], timeout: float | None = None) -> T:
        """Runs fn(engine) on the loop thread between two steps (requests keep running)."""
        return wait_job(self.submit_call(fn), timeout)

    def run_exclusive(
        self, fn: Callable[[LLMEngine], T], abort_running: bool = False, timeout: float | None = None
    ) -> T:
        """Runs fn(engine) on the loop thread once the engine has no unfinished request.

        Admission stops meanwhile (new requests queue, they are not rejected); running requests
        finish first, or are aborted with `abort_running`. Returns fn's result or re-raises its
        exception. TimeoutError if the engine was not idle within `timeout` (fn then never runs).
        """
        return wait_job(self.submit_exclusive(fn, abort_running), timeout)

    def submit_exclusive(self, fn: Callable[[LLMEngine], T], abort_running: bool = False) -> Future:
        """`run_exclusive` without the wait: cancelling the returned future before fn starts (a
        caller that went away) drops the job, and admission resumes at once."""
        return self._enqueue(Job(fn, Future(), exclusive=True, abort_running=abort_running))

    def submit_call(self, fn: Callable[[LLMEngine], T]) -> Future:
        """`call` without the wait: fn runs between two steps unless the future is cancelled first."""
        return self._enqueue(Job(fn, Future(), exclusive=False))

    def _enqueue(self, job: Job) -> Future:
        with self._cond:
            if self._stopped:
                raise NotAcceptingError("the engine loop is stopped")
            (self._exclusive if job.exclusive else self._jobs).append(job)
            self._cond.notify_all()
        job.future.add_done_callback(lambda _: self._wake())
        return job.future

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def pause(self, abort_running: bool = False, timeout: float | None = None) -> None:
        """Rejects new requests (UNAVAILABLE) and returns once the engine is idle; queued ones wait."""
        with self._cond:
            self._paused = True
            if abort_running:
                self._abort_all_locked(include_queued=True)
        self.run_exclusive(lambda engine: None, abort_running=abort_running, timeout=timeout)

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    def stats(self) -> dict[str, int | float]:
        """Engine stats as of the last step, plus the loop's own queue figures."""
        with self._cond:
            stats = dict(self._stats)
            stats["num_requests_unfinished"] = len(self._tracked)
            stats["num_requests_queued"] = len(self._queued)
            return stats

    # ---- the loop thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._has_work)
                if self._stopped and not self._engine_busy:
                    return
                admit, aborts, jobs = self._take_work_locked()
            self._apply(admit, aborts, jobs)
            if self.engine.has_unfinished_requests():
                self._step()
            self._run_exclusive_if_idle()
            self._refresh_stats()

    def _has_work(self) -> bool:
        admitting = bool(self._queued) and self._admitting()
        return (
            self._stopped
            or self._engine_busy
            or admitting
            or bool(self._aborts or self._jobs or self._exclusive)
        )

    def _admitting(self) -> bool:
        while self._exclusive and self._exclusive[0].future.cancelled():
            self._exclusive.popleft()  # its caller left before it ran: it no longer holds admission
        return not self._paused and not self._exclusive

    def _take_work_locked(self) -> tuple[list[_Tracked], list[str], list[Job]]:
        admit: list[_Tracked] = []
        if self._admitting():
            admit = self._queued.take(self._room_locked())
            for tracked in admit:
                tracked.in_engine = True
        aborts, self._aborts = self._aborts, []
        jobs = list(self._jobs)
        self._jobs.clear()
        head = self._exclusive[0] if self._exclusive else None
        if head is not None and head.abort_running and not head.aborted:
            head.aborted = True
            aborts += [r for r, t in self._tracked.items() if t.in_engine and r not in aborts]
        return admit, aborts, jobs

    def _room_locked(self) -> int:
        """Samples the engine can still take at once: queued requests beyond it wait here, in turn."""
        if not self.fair_share:
            return self.max_pending_requests * self.engine.config.max_num_seqs
        running = sum(t.num_samples for t in self._tracked.values() if t.in_engine)
        return self.engine.config.max_num_seqs - running

    def _apply(self, admit: list[_Tracked], aborts: list[str], jobs: list[Job]) -> None:
        for tracked in admit:
            sub = tracked.sub
            try:
                self.engine.add_request(
                    sub.request_id, sub.prompt_token_ids, sub.params, sub.prompt, resume=sub.resume
                )
            except Exception as exc:  # validated at submit, so this is an engine bug: fail this request only
                self._fail([sub.request_id], exc)
        for request_id in aborts:
            self.engine.abort_request(request_id)
        for job in jobs:
            run_job(job, self.engine)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as exc:
            logger.exception("engine step failed; failing the requests in the engine")
            self._fail_engine_requests(exc)
            return
        with self._cond:
            for delta in outputs:
                tracked = self._tracked.get(delta.request_id)
                if tracked is not None:
                    self._deliver_locked(tracked, delta.outputs, delta.finished)
            self._engine_busy = self.engine.has_unfinished_requests()
            self._cond.notify_all()

    def _deliver_locked(self, tracked: _Tracked, samples: list[CompletionOutput], finished: bool) -> None:
        request_id = tracked.sub.request_id
        tracked.samples.extend(samples)
        for sink in tracked.sinks:
            sink.put(LoopEvent(request_id, list(samples), finished=finished))
        if not finished:
            return
        del self._tracked[request_id]
        self.counters["finished"] += 1
        if not tracked.orphaned:
            self._finished[request_id] = tracked
            while len(self._finished) > self.finished_cache_size:
                self._finished.popitem(last=False)

    def _fail_engine_requests(self, exc: Exception) -> None:
        with self._cond:
            failed = [r for r, t in self._tracked.items() if t.in_engine]
        for request_id in failed:
            try:
                self.engine.abort_request(request_id)  # frees its blocks; the abort delta is ignored
            except Exception:
                logger.exception("abort after a failed step raised for %s", request_id)
        self._fail(failed, exc)

    def _fail(self, request_ids: list[str], exc: Exception) -> None:
        error = EngineStepError(f"engine step failed: {type(exc).__name__}: {exc}")
        with self._cond:
            for request_id in request_ids:
                tracked = self._tracked.pop(request_id, None)
                if tracked is None:
                    continue
                self.counters["failed"] += 1
                for sink in tracked.sinks:
                    sink.put(LoopEvent(request_id, [], finished=True, error=error))
            self._engine_busy = self.engine.has_unfinished_requests()
            self._cond.notify_all()

    def _run_exclusive_if_idle(self) -> None:
        with self._cond:
            if not self._exclusive or self.engine.has_unfinished_requests():
                return
            job = self._exclusive.popleft()
        run_job(job, self.engine)
        with self._cond:
            self._cond.notify_all()

    def _refresh_stats(self) -> None:
        stats = self.engine.stats()
        with self._cond:
            self._stats = stats
            self._engine_busy = self.engine.has_unfinished_requests()


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    """Polls `predicate` until true or `timeout` seconds pass (for callers outside the loop)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
