"""Test-session setup: few threads (CI has 2 cores), Triton in its interpreter without CUDA, `gpu` tests skipped."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # Triton reads this once, at its first import (transformers pulls it in)
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(int(os.environ.get("ROLLOUT_TEST_THREADS", "1")))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
