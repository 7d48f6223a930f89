"""Sleep mode on a server: sleep, wake-up and the state, run on the engine loop between steps.

Shared by the gRPC RPCs (Sleep, WakeUp, IsSleeping) and the OpenAI port's vLLM routes (/sleep, /wake_up,
/is_sleeping). Sleep is an exclusive job: admission stops, running requests finish (or are aborted), then
the memory goes (rollout/engine/sleep/engine_memory.py); requests sent meanwhile wait in the queue until
the engine serves again, or are refused while it sleeps under `sleep_requests="refuse"`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollout.engine.sleep.engine_memory import TAGS, check_level, check_tags
from rollout.server.engine_loop import EngineLoop

if TYPE_CHECKING:
    from rollout.engine.llm_engine import LLMEngine


@dataclass(frozen=True)
class SleepState:
    is_sleeping: bool
    level: int
    sleeping_tags: tuple[str, ...]
    awaiting_weights: bool  # awake after level 2, some parameter not yet written by an update


def sleep(loop: EngineLoop, level: int, abort_running: bool = False, timeout: float | None = None) -> int:
    """Frees the engine's memory once no request runs; returns the bytes freed. TimeoutError (nothing
    freed) when requests outlive `timeout`."""
    check_level(level)  # before waiting for an idle engine
    return loop.run_exclusive(lambda engine: engine.memory.sleep(level), abort_running, timeout)


def wake_up(loop: EngineLoop, tags: list[str] | None, timeout: float | None = None) -> None:
    check_tags(tags)
    loop.call(lambda engine: engine.memory.wake_up(tags), timeout)


def sleep_state(loop: EngineLoop, timeout: float | None = None) -> SleepState:
    def read(engine: LLMEngine) -> SleepState:
        memory = engine.memory
        tags = tuple(tag for tag in TAGS if tag in memory.asleep)
        return SleepState(memory.is_sleeping(), memory.level, tags, memory.awaiting_weights())

    return loop.call(read, timeout)
