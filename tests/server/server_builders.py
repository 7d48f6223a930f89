"""Builders for server tests: a tiny engine behind a real gRPC server on a loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rollout import EngineConfig
from rollout.client import RolloutClient
from rollout.engine.llm_engine import LLMEngine
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop
from tests.builders import tiny_model


def make_engine(seed: int = 0, tokenizer: object | None = None, **config: object) -> LLMEngine:
    config.setdefault("num_blocks", 256)
    config.setdefault("max_num_seqs", 64)
    return LLMEngine(tiny_model("llama", seed), tokenizer, EngineConfig(**config))


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
