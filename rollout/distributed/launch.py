"""Starting the ranks: rank 0 is the calling process (the offline LLM or `rollout serve`), the others
are spawned worker processes that load their shard and follow rank 0's steps until it shuts down.

Every rank builds the same `LLMEngine` over its shard, so the load-time guard, the self-check and
the KV sizing run in lockstep (their forwards hold collectives); workers then only use its runner.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from rollout.config import EngineConfig
from rollout.distributed.group import TPGroup, host_store, join
from rollout.distributed.sharding import check_tensor_parallel, load_shard
from rollout.distributed.step_broadcast import DriverRunner, serve_steps
from rollout.engine.llm_engine import LLMEngine
from rollout.engine.model.model_loader import TokenizerArg, resolve_tokenizer
from rollout.engine.runner import RunnerFactory, single_device
from rollout.gc_heap import freeze_startup_heap


def start_driver(path: str | os.PathLike, config: EngineConfig, tokenizer: TokenizerArg = None) -> LLMEngine:
    """Rank 0's engine over its shard, with `tensor_parallel_size - 1` workers started and joined."""
    device = check_tensor_parallel(path, config)
    if dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is already initialized in this process; a tensor-parallel engine needs "
            "its own (one per process: shut the previous one down first)"
        )
    store = host_store(config.tensor_parallel_size)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=run_worker,
            args=(rank, str(path), config, store.port, device.type),
            name=f"rollout-tp-{rank}",
            daemon=True,
        )
        for rank in range(1, config.tensor_parallel_size)
    ]
    for worker in workers:
        worker.start()
    try:
        _await_workers(store, workers)
        group = join(0, config.tensor_parallel_size, device, store, store.port)
        driver = functools.partial(DriverRunner, group=group, workers=workers)
        engine = build_engine(path, config, group, resolve_tokenizer(tokenizer, path), driver)
    except BaseException:
        for worker in workers:
            worker.kill()
        raise
    atexit.register(engine.runner.shutdown)
    return engine


def run_worker(rank: int, path: str, config: EngineConfig, port: int, device_type: str) -> None:
    """A worker process: join, load the shard, build the engine, then follow rank 0's steps."""
    _exit_with_parent()
    device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(minutes=5))
    store.set(f"started/{rank}", "1")
    group = join(rank, config.tensor_parallel_size, device, store, port)
    engine = build_engine(path, config, group, None)
    freeze_startup_heap()
    serve_steps(engine.local_runner, group, engine.adapters)
    group.close()


def build_engine(
    path: str | os.PathLike,
    config: EngineConfig,
    group: TPGroup,
    tokenizer: TokenizerArg,
    runner_factory: RunnerFactory = single_device,
) -> LLMEngine:
    """Every rank's engine over its shard; rank 0 drives its runner through `runner_factory`."""
    engine = LLMEngine(load_shard(path, config, group.device), tokenizer, config, str(path), runner_factory)
    if engine.is_hybrid:  # the step message carries no recurrent-state slots
        raise ValueError(
            "tensor_parallel_size > 1 does not support hybrid models (recurrent layers) yet; serve it with "
            "tensor_parallel_size=1"
        )
    pools = group.all_gather_object(engine.block_manager.num_blocks)
    if len(set(pools)) > 1:  # block ids chosen on rank 0 must exist in every rank's pool
        raise ValueError(
            f"num_blocks: the ranks sized different KV pools ({pools}); set num_blocks explicitly"
        )
    return engine


def _await_workers(store: dist.TCPStore, workers: list[multiprocessing.process.BaseProcess]) -> None:
    """Waits until every worker reached the rendezvous; a worker that died on the way is an error, not a hang."""
    keys = [f"started/{rank}" for rank in range(1, len(workers) + 1)]
    while not store.check(keys):
        dead = [w for w in workers if w.exitcode is not None]
        if dead:
            raise RuntimeError(
                f"tensor-parallel worker {dead[0].name} exited with code {dead[0].exitcode} while starting"
            )
        time.sleep(0.05)


def _exit_with_parent() -> None:
    """A worker dies with rank 0 (Linux): it would otherwise wait for the next step until the timeout."""
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
