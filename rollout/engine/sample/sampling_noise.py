"""Counter-based sampling noise: the exponential variates of the race, as a function of (key, position, token).

A seeded sample's key comes from (seed, sample index) alone, so the noise it races with at a given
position is the same whatever else is in the batch, however the batch is scheduled, and when a
preemption recomputes it. Every row's noise comes from one set of tensor ops, no generator call per
row: the SplitMix64 stream of a per-row state (exact integer arithmetic, the same bits on every CPU
and GPU), whose top 53 bits become a uniform v, and E = -log(1 - v) ~ Exp(1). v keeps its full
relative precision near 0, which is where E is small and a low-probability token can win the race.
"""

from __future__ import annotations

import torch

from rollout.ops.cpu_kernels import load_cpu_kernels
from rollout.ops.host_to_device import to_device
from rollout.ops.workspace import Workspace

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment
_MULTIPLIERS = ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB))


def mix64(z: int) -> int:
    """SplitMix64's finalizer on a host int: a bijection of 64-bit values that spreads every bit."""
    for shift, multiplier in _MULTIPLIERS:
        z = ((z ^ (z >> shift)) * multiplier) & _MASK64
    return z ^ (z >> 31)


def sample_key(seed: int, sample_index: int) -> int:
    """The noise key of sample `sample_index` of a request seeded with `seed` (an int of any size)."""
    h = 0
    while True:  # every 64-bit limb of the seed counts
        h = mix64(((h + _GAMMA) & _MASK64) ^ (seed & _MASK64))
        seed >>= 64
        if not seed:
            break
    return mix64((h + (sample_index + 1) * _GAMMA) & _MASK64)


def row_state(key: int, position: int) -> int:
    """The stream state of the token drawn at `position` (its index in prompt + output)."""
    return mix64((key + position * _GAMMA) & _MASK64)


def log_exponential_noise(
    states: list[int], vocab: int, device: torch.device, workspace: Workspace | None = None
) -> torch.Tensor:
    """[R, vocab] fp32: log E for E ~ Exp(1), element (r, t) from output t + 1 of row r's stream.

    With a `workspace`, the result and every intermediate live in its reused buffers (valid until the
    next call with the same workspace)."""
    workspace = workspace or Workspace()
    v = workspace.get("noise", (len(states), vocab), torch.float32, device)
    kernels = load_cpu_kernels() if device.type == "cpu" else None
    if kernels is not None:  # the same bits in one pass (csrc/sampling_noise_cpu.cpp)
        kernels.uniform_noise(v, state_tensor(states))
    else:
        uniforms(stream_bits(states, vocab, device, workspace), v)
    return v.neg_().log1p_().neg_().log_()  # log(-log(1 - v))


def uniforms(bits: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """v in (0, 1) fp32 from 53-bit integers: fp32 rounds the top 2**-25 of the range to 1, which would
    make E infinite, hence the clamp."""
    return out.copy_(bits).mul_(2.0**-53).add_(2.0**-54).clamp_(max=1.0 - 2.0**-24)


def stream_bits(
    states: list[int], vocab: int, device: torch.device, workspace: Workspace | None = None
) -> torch.Tensor:
    """[R, vocab] int64: the top 53 bits of outputs 1..vocab of each row's SplitMix64 stream."""
    workspace = workspace or Workspace()
    shape = (len(states), vocab)
    base = to_device([_signed(s) for s in states], torch.int64, device)[:, None]
    steps = torch.arange(1, vocab + 1, dtype=torch.int64, device=device) * _signed(_GAMMA)
    z = torch.add(base, steps, out=workspace.get("bits", shape, torch.int64, device))  # wraps mod 2**64
    scratch = workspace.get("bits scratch", shape, torch.int64, device)
    for shift, multiplier in _MULTIPLIERS:
        z.bitwise_xor_(_logical_shift(z, shift, scratch)).mul_(_signed(multiplier))
    z.bitwise_xor_(_logical_shift(z, 31, scratch))
    return _logical_shift(z, 11, scratch)


def _logical_shift(z: torch.Tensor, shift: int, out: torch.Tensor) -> torch.Tensor:
    """z >>> shift (torch shifts int64 arithmetically: the sign bits are masked off)."""
    return torch.bitwise_right_shift(z, shift, out=out).bitwise_and_((1 << (64 - shift)) - 1)


def state_tensor(states: list[int]) -> torch.Tensor:
    """[R] int64 on the CPU: the states' 64 bits, as the compiled kernels take them."""
    return torch.tensor([_signed(s) for s in states], dtype=torch.int64)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
