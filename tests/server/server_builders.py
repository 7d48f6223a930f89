"""Builders for server tests: a tiny engine behind a real gRPC server on a loopback port."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rollout import EngineConfig
from rollout.client import RolloutClient
from rollout.engine.llm_engine import LLMEngine
from rollout.outputs import CompletionOutput
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop
from tests.builders import tiny_model


def make_engine(
    seed: int = 0, tokenizer: object | None = None, arch: str = "llama", **config: object
) -> LLMEngine:
    config.setdefault("num_blocks", 256)
    config.setdefault("max_num_seqs", 64)
    return LLMEngine(tiny_model(arch, seed), tokenizer, EngineConfig(**config))


def slow_steps(engine: LLMEngine, delay: float = 0.01) -> dict[str, list[CompletionOutput]]:
    """Makes every step of `engine` sleep `delay` s first; returns each request id's finished samples.

    A tiny engine steps in about a millisecond, so a 450-token request would finish before a test can
    cancel it; at 10 ms a step it needs over 4 s, and its finish reasons show whether it was cut short.
    """
    finished: dict[str, list[CompletionOutput]] = defaultdict(list)
    step = engine.step

    def slow_step() -> list:
        time.sleep(delay)
        outputs = step()
        for out in outputs:
            finished[out.request_id].extend(c for c in out.outputs if c.finish_reason is not None)
        return outputs

    engine.step = slow_step
    return finished


def finished_at_arrival(loop: EngineLoop, prompt: list[int]) -> dict[str, int]:
    """Records the loop's finished count when `prompt` is first submitted (wraps `loop.submit`): fair-share
    tests count from a request's arrival, since on a busy machine a client's own start-up can take as long
    as several steps of the batch it must not wait behind."""
    seen: dict[str, int] = {}
    submit = loop.submit

    def recording(submissions: list) -> object:
        if any(list(s.prompt_token_ids) == prompt for s in submissions):
            seen.setdefault("finished", loop.counters["finished"])
        return submit(submissions)

    loop.submit = recording
    return seen


def wait_for(predicate: Callable[[], bool], timeout: float = 120.0, what: str = "condition") -> None:
    """Polls `predicate`; fails the test (never hangs it) if it is not true within `timeout` s, a hang
    guard: generous, so a busy machine never trips it."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        time.sleep(0.005)


@contextmanager
def serving(
    engine: LLMEngine | None = None, loop_kwargs: dict | None = None, **server_kwargs: object
) -> Iterator[RolloutServer]:
    """A started server on 127.0.0.1:<free port> around `engine` (default: a fresh tiny engine)."""
    loop = EngineLoop(engine or make_engine(), **(loop_kwargs or {}))
    server = RolloutServer(loop, **server_kwargs).start()
    try:
        yield server
    finally:
        server.stop(grace=0.0)


@contextmanager
def client_for(server: RolloutServer, **kwargs: object) -> Iterator[RolloutClient]:
    with RolloutClient(server.address, **kwargs) as client:
        yield client
