"""The compiled exponential race picks exactly the torch ops' token (seeded samples must not depend on
whether the kernel was built), on rows that exercise its shortcut and its fallbacks."""

from __future__ import annotations

import pytest
import torch

from rollout.engine.sample import exponential_race as race_module
from rollout.engine.sample.exponential_race import exponential_race, race_kernels, torch_scores
from rollout.engine.sample.sampling_noise import row_state, sample_key, state_tensor
from rollout.ops.workspace import Workspace


def _kernels():
    kernels = race_kernels()
    if kernels is None:  # no MKL or Sleef in this torch build: the torch ops serve, nothing to compare
        pytest.skip("the compiled race is not used on this machine")
    return kernels


def _rows(vocab: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """Log-softmax rows of several shapes: flat, peaked, temperature-sharpened, truncated, one-hot."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, vocab, generator=g) * torch.tensor([[1.0], [4.0], [12.0], [2.0], [0.1], [1.0]])
    logits[3, torch.randperm(vocab, generator=g)[: vocab // 2]] = float("-inf")  # top-k / top-p cuts
    logits[5, :] = float("-inf")
    logits[5, vocab // 3] = 0.0  # only one token left
    states = [row_state(sample_key(seed, i), 17 + i) for i in range(6)]
    return torch.log_softmax(logits, dim=-1), states


@pytest.mark.parametrize("vocab", [1, 5, 1000, 1031, 4096, 50_000])
def test_the_kernel_picks_the_torch_ops_token(vocab: int) -> None:
    _kernels()
    for seed in range(20):
        logprobs, states = _rows(vocab, seed)
        expected = torch_scores(logprobs, states, Workspace()).argmax(dim=-1)
        assert torch.equal(exponential_race(logprobs, states, Workspace()), expected)


def test_rows_with_nan_or_nothing_left_pick_as_argmax_does() -> None:
    kernels = _kernels()
    logprobs, states = _rows(1031, 0)
    logprobs[0, 100] = float("nan")
    logprobs[1, :] = float("-inf")
    logprobs[2, 7] = float("inf")
    tokens = torch.empty(6, dtype=torch.int64)
    kernels.exponential_race(tokens, logprobs, state_tensor(states))
    assert torch.equal(tokens, torch_scores(logprobs, states, Workspace()).argmax(dim=-1))
    assert tokens[:3].tolist() == [100, 0, 7]


def test_the_full_pass_scores_are_the_torch_ops_bits() -> None:
    kernels = _kernels()
    logprobs, states = _rows(2 * 1024 + 13, 3)
    tokens, scores = torch.empty(6, dtype=torch.int64), torch.empty_like(logprobs)
    kernels.exponential_race_scores(tokens, scores, logprobs, state_tensor(states))
    expected = torch_scores(logprobs, states, Workspace())
    assert torch.equal(scores, expected)
    assert torch.equal(tokens, expected.argmax(dim=-1))


def test_a_kernel_that_differs_from_torch_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    _kernels()
    monkeypatch.setattr(race_module, "_reproduces_torch", lambda kernels: False)
    assert race_kernels.__wrapped__() is None
