"""Builders for weight-update tests over real gRPC servers on loopback, and reference outputs."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from rollout import SamplingParams
from rollout.server.app import RolloutServer
from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync, weight_sync_hook
from tests.builders import random_prompts, tiny_llm
from tests.server.server_builders import make_engine, serving

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
PROMPTS = random_prompts(3, 20, 40, seed=5)


@contextmanager
def weight_server(
    seed: int = 0, idle_timeout_s: float | None = None, arch: str = "llama", **config: object
) -> Iterator[RolloutServer]:
    """A started server over a tiny engine (`arch`, model seed `seed`) with the WeightSyncService."""
    hook = register_weight_sync if idle_timeout_s is None else weight_sync_hook(idle_timeout_s)
    hooks = dict(extra_servicers=[hook], extra_service_names=[SERVICE_NAME])
    with serving(make_engine(seed, arch=arch, **config), **hooks) as server:
        yield server


def greedy_tokens(llm_or_client, prompts: list[list[int]] = PROMPTS) -> list[list[int]]:
    return [out.outputs[0].token_ids for out in llm_or_client.generate(prompts, GREEDY)]


def reference_tokens(seed: int, prompts: list[list[int]] = PROMPTS) -> list[list[int]]:
    """Greedy outputs of a fresh offline engine built with the model of `seed`."""
    return greedy_tokens(tiny_llm(seed=seed), prompts)


@contextmanager
def stdin_processes(*commands: list[str]) -> Iterator[list[subprocess.Popen]]:
    """One process per command, each serving until its stdin closes (on exit: 20 s to stop, else killed)."""
    procs = [subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for c in commands]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)


def addresses_of(procs: list[subprocess.Popen]) -> list[str]:
    """The address each process printed first."""
    return [proc.stdout.readline().strip() for proc in procs]
