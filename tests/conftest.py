"""Test-session setup: few threads (CI has 2 cores), Triton in its interpreter without CUDA, `gpu` tests skipped.

The CPU kernels are built (or found in torch's extension cache) once, before any test: the first
build takes tens of seconds, which must not land inside a test that waits for a server with a deadline.

Subprocesses (a `rollout serve`, the examples, trainer and server ranks) import this checkout, not whatever
`rollout` an environment happens to have installed: the repository root goes first on PYTHONPATH.
"""

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # Triton reads this once, at its first import (transformers pulls it in)
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO_ROOT = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(int(os.environ.get("ROLLOUT_TEST_THREADS", "1")))


def pytest_sessionstart(session: pytest.Session) -> None:
    from rollout.ops.cpu_kernels import load_cpu_kernels

    load_cpu_kernels()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
