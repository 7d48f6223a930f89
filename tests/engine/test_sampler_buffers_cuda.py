"""The sampler's reused memory on CUDA, where reuse can race: a step's results must not alias a buffer the next
step overwrites while a copy to the host is still in flight, and a step allocates no [rows, vocab] tensor once
its buffers exist. The same properties as test_sampler_buffers.py (CPU), on the device (the GPU suite, phase b)."""

from __future__ import annotations

import copy

import pytest
import torch

from rollout.engine.sample.sampler import Sampler, SamplerOutput
from rollout.sampling_params import SamplingParams
from tests.engine.test_sampler_buffers import PARAMS, VOCAB, FreshFullSize, rows_of

pytestmark = pytest.mark.gpu


def step(sampler: Sampler, params: list[SamplingParams], seed: int, device: str = "cuda") -> SamplerOutput:
    logits = torch.randn(len(params), VOCAB, generator=torch.Generator().manual_seed(seed)) * 4
    return sampler(logits.to(device), rows_of(params))


def test_each_step_equals_a_fresh_samplers_on_cuda_whatever_steps_ran_before() -> None:
    sampler = Sampler(seed=0)
    for seed, params in enumerate([PARAMS, PARAMS[2:5], PARAMS[1:6]]):
        assert step(sampler, params, seed) == step(Sampler(seed=0), params, seed)


def test_a_steps_output_on_cuda_is_unchanged_by_the_next_steps() -> None:
    sampler = Sampler(seed=0)
    first = step(sampler, PARAMS, 0)
    kept = copy.deepcopy(first)
    for seed in range(1, 4):  # back to back: nothing synchronizes between them but the sampler itself
        step(sampler, PARAMS[::-1], seed)
    torch.cuda.synchronize()
    assert first == kept


def test_a_step_on_cuda_allocates_no_vocabulary_sized_tensor_once_its_buffers_exist() -> None:
    sampler = Sampler(seed=0)
    step(sampler, PARAMS, 0)
    logits = (torch.randn(len(PARAMS), VOCAB, generator=torch.Generator().manual_seed(1)) * 4).cuda()
    with FreshFullSize(logits.numel()) as fresh:
        sampler(logits, rows_of(PARAMS))
    assert fresh.ops == []
