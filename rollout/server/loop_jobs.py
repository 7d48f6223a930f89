"""Jobs the engine loop runs on its thread between two steps: a function of the engine and its future.

A caller waits on the future with `wait_job`; cancelling it before the loop starts the job drops it
(the loop checks with `set_running_or_notify_cancel`), so a caller that gave up changes nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from rollout.engine.llm_engine import LLMEngine

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class Job:
    fn: Callable[[LLMEngine], object]
    future: Future
    exclusive: bool
    abort_running: bool = False
    aborted: bool = False


class JobQueue:
    """Jobs waiting for the loop thread: calls run between two steps; exclusive jobs run in order, each
    once the engine is idle, and while one waits (not cancelled) no new request is admitted."""

    def __init__(self) -> None:
        self.calls: deque[Job] = deque()
        self.exclusive: deque[Job] = deque()

    def __bool__(self) -> bool:
        return bool(self.calls or self.exclusive)

    def add(self, job: Job) -> None:
        (self.exclusive if job.exclusive else self.calls).append(job)

    def take_calls(self) -> list[Job]:
        calls = list(self.calls)
        self.calls.clear()
        return calls

    def next_exclusive(self) -> Job | None:
        """The exclusive job that holds admission now; jobs whose callers left first are dropped."""
        while self.exclusive and self.exclusive[0].future.cancelled():
            self.exclusive.popleft()
        return self.exclusive[0] if self.exclusive else None


def run_job(job: Job, engine: LLMEngine) -> None:
    if not job.future.set_running_or_notify_cancel():
        return  # the caller timed out and cancelled it
    try:
        job.future.set_result(job.fn(engine))
    except BaseException as exc:
        job.future.set_exception(exc)


def wait_job(future: Future, timeout: float | None) -> T:
    """fn's result within `timeout`; on timeout the job is cancelled (it never runs) and TimeoutError
    raised, unless it already started, in which case its result is awaited (fn cannot be interrupted)."""
    try:
        return future.result(timeout)
    except TimeoutError:
        if not future.cancel():
            return future.result()
        raise TimeoutError(f"the engine was not idle within {timeout} s") from None
