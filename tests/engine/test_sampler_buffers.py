"""The sampler's reused memory: a step allocates no [rows, vocab] tensor once its buffers exist, and
reusing them changes nothing: each step equals a fresh sampler's, whatever ran before and whatever ran
after, and the caller's logits are never written."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rollout import SamplingParams
from rollout.engine.sample.sampler import Sampler, SamplerOutput, SampleRow

VOCAB = 1000
PROCESSORS = dict(presence_penalty=0.5, frequency_penalty=0.3, logit_bias={3: 2.0}, bad_words_token_ids=[[5]])
# every full-size temporary of the sampler: the copy, temperature (in place and not), each filter's
# mask alone and after another's, raw logprobs, processed logprobs, the race, greedy rows
PARAMS = [
    SamplingParams(temperature=1.0, logprobs=2),
    SamplingParams(temperature=0.7, top_k=20, logprobs=0),
    SamplingParams(temperature=1.3, top_p=0.8, logprobs=1, logprobs_mode="raw"),
    SamplingParams(temperature=1.0, min_p=0.05, top_k=50, return_kept_tokens=True),
    SamplingParams(temperature=0.5, top_p=0.9, min_p=0.1, repetition_penalty=1.3, logprobs=3, **PROCESSORS),
    SamplingParams(temperature=0, logprobs=2, logprobs_mode="raw"),
    SamplingParams(temperature=0.9, top_k=5, top_p=0.5, **PROCESSORS),
]


def rows_of(params: list[SamplingParams]) -> list[SampleRow]:
    """Seeded rows: their tokens depend on nothing but (seed, sample index, position) and the logits."""
    return [SampleRow(replace(p, seed=7), i, [5, 6, 7], 1) for i, p in enumerate(params)]


def logits_of(num_rows: int, seed: int) -> torch.Tensor:
    return torch.randn(num_rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 4


def step(sampler: Sampler, params: list[SamplingParams], seed: int) -> SamplerOutput:
    return sampler(logits_of(len(params), seed), rows_of(params))


def test_each_step_equals_a_fresh_samplers_whatever_steps_ran_before() -> None:
    """Row counts 7, 3, 5: the buffers hold a larger step's leftovers, then grow again."""
    sampler = Sampler(seed=0)
    for seed, params in enumerate([PARAMS, PARAMS[2:5], PARAMS[1:6]]):
        assert step(sampler, params, seed) == step(Sampler(seed=0), params, seed)


def test_a_steps_output_is_unchanged_by_the_next_step() -> None:
    sampler = Sampler(seed=0)
    first = step(sampler, PARAMS, 0)
    kept = copy.deepcopy(first)
    step(sampler, PARAMS[::-1][:4], 1)
    step(sampler, PARAMS, 2)
    assert first == kept


def test_the_callers_logits_are_never_written() -> None:
    for params in ([p] for p in PARAMS):
        logits = logits_of(len(params), 3)
        before = logits.clone()
        Sampler(seed=0)(logits, rows_of(params))
        assert torch.equal(logits, before)


class FreshFullSize(TorchDispatchMode):
    """Ops whose result is a new tensor of at least `numel` elements (an out= or in-place op's is an argument)."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel = numel
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        result = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        for tensor in _tensors(result):
            if tensor.numel() >= self.numel and tensor.untyped_storage().data_ptr() not in given:
                self.ops.append(func.overloadpacket.__name__)
        return result


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def test_a_step_allocates_no_vocabulary_sized_tensor_once_its_buffers_exist() -> None:
    sampler = Sampler(seed=0)
    step(sampler, PARAMS, 0)
    logits, rows = logits_of(len(PARAMS), 1), rows_of(PARAMS)
    with FreshFullSize(logits.numel()) as fresh:
        sampler(logits, rows)
    assert fresh.ops == []
