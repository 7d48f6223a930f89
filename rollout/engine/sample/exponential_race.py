"""The sampler's exponential race, argmax(log p - log E), in one pass per row where that is exact.

The torch ops make five passes over [rows, vocab] (the noise, log1p, log, negation, sum) before the
argmax; on a CPU decode step they are most of the sampler's time. The compiled kernel
(csrc/exponential_race_cpu.cpp) computes the same scores with the same functions torch calls (Sleef's
log1p, MKL's log) and keeps only each row's winner. It is used only after it has reproduced the torch
ops' scores bit for bit on a probe batch in this process, so a seeded sample's tokens do not depend on
whether the kernel was built; otherwise the torch ops serve, as they do on every other device.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

import torch

from rollout.engine.sample.sampling_noise import log_exponential_noise, state_tensor
from rollout.ops.cpu_kernels import load_cpu_kernels
from rollout.ops.workspace import Workspace

logger = logging.getLogger(__name__)


def exponential_race(logprobs: torch.Tensor, states: list[int], workspace: Workspace) -> torch.Tensor:
    """[R] int64: per row, the first argmax over tokens of logprobs - log E, E the row's Exp(1) noise."""
    kernels = race_kernels() if logprobs.device.type == "cpu" else None
    if kernels is not None and logprobs.dtype == torch.float32 and logprobs.is_contiguous():
        tokens = torch.empty(logprobs.shape[0], dtype=torch.int64)
        kernels.exponential_race(tokens, logprobs, state_tensor(states))
        return tokens
    return torch_scores(logprobs, states, workspace).argmax(dim=-1)


def torch_scores(logprobs: torch.Tensor, states: list[int], workspace: Workspace) -> torch.Tensor:
    """[R, vocab]: logprobs - log E through torch ops (in the workspace's noise buffer)."""
    noise = log_exponential_noise(states, logprobs.shape[1], logprobs.device, workspace)
    return noise.neg_().add_(logprobs)


@functools.cache
def race_kernels() -> ModuleType | None:
    """The compiled kernels when their race reproduces the torch ops here, else None (said once)."""
    kernels = load_cpu_kernels()
    if kernels is None or not kernels.race_available():
        return None
    if not _reproduces_torch(kernels):
        logger.warning(
            "rollout's compiled sampling race differs from the torch ops here; using the torch ops"
        )
        return None
    return kernels


def _reproduces_torch(kernels: ModuleType) -> bool:
    """Scores and winners (full pass and shortcut) equal bit for bit on rows that cross the kernel's
    blocks, with -inf and NaN."""
    generator = torch.Generator().manual_seed(0)
    logprobs = torch.log_softmax(torch.randn(6, 2 * 1024 + 13, generator=generator) * 4, dim=-1)
    logprobs[1, ::3] = float("-inf")  # truncated tokens
    logprobs[2, 700] = float("nan")
    states = [int(s) % (1 << 64) for s in torch.randint(-(2**62), 2**62, (6,), generator=generator)]
    expected = torch_scores(logprobs, states, Workspace())
    tokens, scores = torch.empty(6, dtype=torch.int64), torch.empty_like(logprobs)
    kernels.exponential_race_scores(tokens, scores, logprobs, state_tensor(states))
    same_scores = torch.equal(scores.isnan(), expected.isnan()) and torch.equal(
        scores.nan_to_num(), expected.nan_to_num()
    )
    shortcut = torch.empty(6, dtype=torch.int64)  # the production path: logs only where a token can win
    kernels.exponential_race(shortcut, logprobs, state_tensor(states))
    winners = expected.argmax(dim=-1)
    return same_scores and torch.equal(tokens, winners) and torch.equal(shortcut, winners)
