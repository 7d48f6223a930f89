"""Counter-based noise: SplitMix64 bit for bit, a row's noise independent of its batch, Exp(1) in law."""

from __future__ import annotations

import math

import pytest
import torch

from rollout.engine.sample.sampling_noise import (
    log_exponential_noise,
    mix64,
    row_state,
    sample_key,
    stream_bits,
)

CPU = torch.device("cpu")
MASK64 = (1 << 64) - 1


def splitmix64_outputs(state: int, count: int) -> list[int]:
    """The published SplitMix64 generator in plain Python ints: the oracle of the tensor version."""
    outputs = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        outputs.append(z ^ (z >> 31))
    return outputs


def test_tensor_streams_are_splitmix64_bit_for_bit() -> None:
    states = [0, 1, MASK64, 1 << 63, row_state(sample_key(42, 3), 17)]
    bits = stream_bits(states, 300, CPU)
    expected = [[z >> 11 for z in splitmix64_outputs(s, 300)] for s in states]
    assert bits.tolist() == expected
    assert [mix64((s + 0x9E3779B97F4A7C15) & MASK64) for s in states] == [
        splitmix64_outputs(s, 1)[0] for s in states
    ]


@pytest.mark.parametrize("vocab", [7, 1000, 4099])
def test_a_rows_noise_does_not_depend_on_its_batch(vocab: int) -> None:
    states = [row_state(sample_key(seed, i), pos) for seed, i, pos in [(1, 0, 5), (9, 2, 40), (1, 1, 5)]]
    batched = log_exponential_noise(states, vocab, CPU)
    for r, state in enumerate(states):
        assert torch.equal(log_exponential_noise([state], vocab, CPU)[0], batched[r])
    assert not torch.equal(batched[0], batched[2])  # another sample of the same request: other noise


def test_keys_separate_seeds_samples_and_positions() -> None:
    keys = {sample_key(seed, i) for seed in (0, 1, 2**64, 2**64 + 1, 2**200) for i in range(4)}
    assert len(keys) == 20
    assert len({row_state(sample_key(0, 0), p) for p in range(1000)}) == 1000


def test_noise_is_exponential_in_law() -> None:
    """E = exp(noise) against Exp(1): Kolmogorov-Smirnov at the 0.999 level, and the tail the race
    needs for rare tokens (E near 0) is there: P(E < 1e-6) matches 1e-6."""
    states = [row_state(sample_key(7, i), 3) for i in range(64)]
    e = log_exponential_noise(states, 4096, CPU).exp().double().flatten()
    n = e.numel()
    cdf = 1 - torch.exp(-e.sort().values)
    ks = torch.maximum((torch.arange(1, n + 1) / n - cdf).abs(), (cdf - torch.arange(n) / n).abs()).max()
    assert ks < 1.95 / math.sqrt(n)
    small = (e < 1e-6).sum().item()  # Poisson with mean n * 1e-6 = 0.26: allow up to 5
    assert small <= 5 and e.min() > 0 and torch.isfinite(e).all()
    assert (e < 1e-3).sum().item() == pytest.approx(n * (1 - math.exp(-1e-3)), rel=0.15)
