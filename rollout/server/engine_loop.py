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
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

from rollout.outputs import CompletionOutput
from rollout.server.fair_share import FairShare
from rollout.server.handle import LoopEvent, RequestHandle, Submission
from rollout.server.loop_errors import EngineStepError, NotAcceptingError
from rollout.server.loop_jobs import Job, JobQueue, run_job, wait_job
from rollout.server.request_registry import RequestRegistry, Tracked
from rollout.server.stop_watch import StopWatch
from rollout.structured_outputs.compile_pool import DEFAULT_LIMITS, CompileLimits

if TYPE_CHECKING:
    from rollout.engine.llm_engine import LLMEngine

T = TypeVar("T")
logger = logging.getLogger(__name__)


class EngineLoop:
    """Owns `engine` on a background thread; thread-safe submit, abort, pause and exclusive jobs."""

    def __init__(
        self,
        engine: LLMEngine,
        max_pending_requests: int = 4096,
        finished_cache_size: int = 4096,
        fair_share: bool = True,
        grammar_limits: CompileLimits | None = DEFAULT_LIMITS,
        sleep_requests: str = "wait",
    ):
        self.engine = engine
        if grammar_limits is not None:  # structured outputs compile in bounded workers (compile_pool.py)
            engine.grammars.bound(grammar_limits)
        self.fair_share = fair_share  # False: every queued request enters the engine at once (FIFO)
        engine.detokenize = False  # the tokenizer never runs on the loop thread; RPC threads decode
        # Stop strings are found by a thread of their own, fed each step's tokens (stop_watch.py).
        self._stop_watch = StopWatch(engine.tokenizer, self.finish_on_stop_string)
        engine.stop_strings.collect_tokens = engine.tokenizer is not None
        self._stop_hits: list[tuple[str, int, int, str]] = []
        self.max_pending_requests = max_pending_requests
        self._cond = threading.Condition()
        self._requests = RequestRegistry(finished_cache_size)  # read and written under _cond
        self._tracked = self._requests.unfinished
        self.counters = self._requests.counters
        self._queued: FairShare[Tracked] = FairShare()  # admission order: rollout/server/fair_share.py
        self._aborts: list[str] = []
        self._jobs = JobQueue()
        self._paused = False
        self._draining = False
        self._stopped = False
        self._engine_busy = False
        # While the engine sleeps, requests "wait" in the queue or are refused ("refuse": UNAVAILABLE).
        self.sleep_requests = sleep_requests
        self._stats: dict[str, int | float] = engine.stats()
        self._thread = threading.Thread(target=self._run, name="rollout-engine-loop", daemon=True)

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> EngineLoop:
        """Starts the loop thread (once; later calls are no-ops)."""
        if not self._thread.is_alive() and not self._stopped:
            self._stop_watch.start()
            self._thread.start()
        return self

    def stop(self, grace: float | None = None, abort_wait: float = 10.0) -> None:
        """Stops admitting, lets unfinished requests finish for up to `grace` seconds, aborts the rest
        and waits up to `abort_wait` seconds for their abort samples to reach their callers.

        `grace=None` waits for every unfinished request; queued requests of a paused loop never run,
        so pass a grace period when paused.
        """
        with self._cond:
            self._draining = True
            self._cond.wait_for(lambda: not self._tracked, timeout=grace)
            self._abort_all_locked(include_queued=True)
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._tracked, timeout=abort_wait)
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            # the step under way ends first; past abort_wait the (daemon) thread is left to finish it
            self._thread.join(abort_wait)
            self._stop_watch.stop()

    def __enter__(self) -> EngineLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(grace=0.0)

    @property
    def accepting(self) -> bool:
        asleep = self.sleep_requests == "refuse" and self.engine.memory.is_sleeping()
        return not (self._paused or self._draining or self._stopped or asleep)

    # ---- requests -----------------------------------------------------------------------------

    def submit(self, submissions: list[Submission]) -> RequestHandle:
        """Queues every submission or none; events of all of them arrive on the returned handle.

        Raises ValueError (invalid input, naming the field), NotAcceptingError, QueueFullError or
        RequestConflictError. A known request id attaches to the running request, or replays its
        cached result: nothing is generated twice.
        """
        for sub in submissions:
            self.engine.validate_request(sub.prompt_token_ids, sub.params, multi_modal=sub.multi_modal)
        sink: queue.SimpleQueue[LoopEvent] = queue.SimpleQueue()
        with self._cond:
            self._check_admission_locked(submissions)
            for sub in submissions:
                tracked = self._requests.attach(sub, sink, self._aborts)
                if tracked is not None:
                    self._queued.append(tracked)
            self._cond.notify_all()
        return RequestHandle(self.detach, submissions, sink)

    def check_accepting(self) -> None:
        """NotAcceptingError (counted) while paused or draining: the front ends ask before any work
        (the asyncio thread too: no lock unless it refuses)."""
        if self.accepting:
            return
        with self._cond:
            self._check_accepting_locked()

    def _check_accepting_locked(self) -> None:
        if not self.accepting:
            self.counters["rejected_unavailable"] += 1
            state = "paused" if self._paused else "draining" if self._draining else "asleep"
            raise NotAcceptingError(f"the server is {state} and not accepting requests")

    def _check_admission_locked(self, submissions: list[Submission]) -> None:
        self._check_accepting_locked()
        self._requests.check(submissions, self.max_pending_requests)

    def detach(self, request_id: str, sink: queue.SimpleQueue[LoopEvent]) -> None:
        """A caller went away; the request is aborted once no caller is attached to it."""
        with self._cond:
            orphan = self._requests.detach(request_id, sink)
            if orphan is not None:
                self._abort_locked(orphan)
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

    def _abort_locked(self, tracked: Tracked) -> None:
        if tracked.in_engine:
            self._aborts.append(tracked.sub.request_id)
            return
        self._queued.remove(tracked)
        version = int(self._stats.get("weight_version", 0))
        samples = [
            CompletionOutput(i, [], None, None, "abort", version, None) for i in range(tracked.sub.params.n)
        ]
        self._requests.deliver(tracked, samples, finished=True)

    def _abort_all_locked(self, include_queued: bool) -> None:
        for tracked in list(self._tracked.values()):
            if include_queued or tracked.in_engine:
                self._abort_locked(tracked)

    def finish_on_stop_string(self, request_id: str, sample_index: int, num_tokens: int, stop: str) -> None:
        """The stop watch found `stop` ending at output token `num_tokens - 1`: finish the sample there."""
        with self._cond:
            self._stop_hits.append((request_id, sample_index, num_tokens, stop))
            self._cond.notify_all()

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
            self._jobs.add(job)
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
                stop_hits, self._stop_hits = self._stop_hits, []
            self._apply(admit, aborts, jobs)
            for hit in stop_hits:  # False when it finished meanwhile: the RPC thread's finish_text cuts it
                self.engine.finish_on_stop_string(*hit)
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
            or bool(self._aborts or self._jobs or self._stop_hits)
        )

    def _admitting(self) -> bool:
        serving = self.engine.memory.serving()  # asleep: requests wait for wake-up (and weights)
        return not self._paused and serving and self._jobs.next_exclusive() is None

    def _take_work_locked(self) -> tuple[list[Tracked], list[str], list[Job]]:
        admit: list[Tracked] = []
        if self._admitting():
            admit = self._queued.take(self._room_locked())
            for tracked in admit:
                tracked.in_engine = True
        aborts, self._aborts = self._aborts, []
        jobs = self._jobs.take_calls()
        head = self._jobs.next_exclusive()
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

    def _apply(self, admit: list[Tracked], aborts: list[str], jobs: list[Job]) -> None:
        for tracked in admit:
            sub = tracked.sub
            try:
                self.engine.add_request(
                    sub.request_id,
                    sub.prompt_token_ids,
                    sub.params,
                    sub.prompt,
                    resume=sub.resume,
                    stream=sub.stream,
                    multi_modal=sub.multi_modal,
                )
                if sub.params.stop:
                    self._stop_watch.watch(sub.request_id, sub.prompt_token_ids, sub.params)
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
        self._stop_watch.feed(self.engine.stop_strings.take_tokens())
        streamed = self.engine.streamed.take()
        for delta in outputs:
            if delta.finished:
                self._stop_watch.forget(delta.request_id)
        with self._cond:
            if streamed:  # before the finished samples: a sample's tokens precede the sample
                self._requests.deliver_tokens(streamed)
            for delta in outputs:
                tracked = self._tracked.get(delta.request_id)
                if tracked is not None:
                    self._requests.deliver(
                        tracked, delta.outputs, delta.finished, delta.prompt_logprobs, delta.num_cached_tokens
                    )
            self._engine_busy = self.engine.has_unfinished_requests()
            self._cond.notify_all()

    def _fail_engine_requests(self, exc: Exception) -> None:
        with self._cond:
            failed = self._requests.in_engine()
        for request_id in failed:
            try:
                self.engine.abort_request(request_id)  # frees its blocks; the abort delta is ignored
            except Exception:
                logger.exception("abort after a failed step raised for %s", request_id)
        self._fail(failed, exc)

    def _fail(self, request_ids: list[str], exc: Exception) -> None:
        error = EngineStepError(f"engine step failed: {type(exc).__name__}: {exc}")
        for request_id in request_ids:
            self._stop_watch.forget(request_id)
        with self._cond:
            self._requests.fail(request_ids, error)
            self._engine_busy = self.engine.has_unfinished_requests()
            self._cond.notify_all()

    def _run_exclusive_if_idle(self) -> None:
        with self._cond:
            if not self._jobs.exclusive or self.engine.has_unfinished_requests():
                return
            job = self._jobs.exclusive.popleft()
        run_job(job, self.engine)
        with self._cond:
            self._cond.notify_all()

    def _refresh_stats(self) -> None:
        stats = self.engine.stats()
        with self._cond:
            self._stats = stats
            self._engine_busy = self.engine.has_unfinished_requests()
