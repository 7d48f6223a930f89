"""Sampler host work: no vocabulary sort unless top-p asks, one batched call equals row-by-row calls."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rollout import SamplingParams
from rollout.engine.sample import sampler as sampler_module
from rollout.engine.sample.sampler import Sampler, SampleRow
from tests.engine.op_recorder import OpRecorder

VOCAB = 1000
REPO_ROOT = Path(__file__).resolve().parents[2]


def make_rows(params: list[SamplingParams], seed: int | None = None) -> list[SampleRow]:
    """With `seed`, row i is sample i of a request seeded with it; without, the rows are unseeded."""
    return [SampleRow(replace(p, seed=seed), i, [5, 6, 7]) for i, p in enumerate(params)]


def ops_of(params: list[SamplingParams]) -> set[str]:
    logits = torch.randn(len(params), VOCAB, generator=torch.Generator().manual_seed(0))
    with OpRecorder() as recorder:
        Sampler(seed=0)(logits, make_rows(params))
    return recorder.ops


SORTS = {"sort", "argsort", "msort", "topk"}


@pytest.mark.parametrize(
    "params",
    [
        dict(temperature=0),
        dict(temperature=0.7),
        dict(temperature=1.0, min_p=0.1),
        dict(temperature=0.9, repetition_penalty=1.3),
        dict(temperature=0.8, logprobs=0),
        dict(temperature=0.8, logprobs=0, logprobs_mode="raw"),
    ],
    ids=["greedy", "temperature", "min_p", "repetition_penalty", "logprobs", "raw_logprobs"],
)
def test_sampling_without_top_p_top_k_or_top_logprobs_never_sorts(params: dict) -> None:
    assert not ops_of([SamplingParams(**params)] * 4) & SORTS


def test_top_k_uses_a_partial_topk_and_only_top_p_sorts() -> None:
    assert ops_of([SamplingParams(temperature=1.0, top_k=20)] * 2) & SORTS == {"topk"}
    assert "sort" in ops_of([SamplingParams(temperature=1.0, top_p=0.9)] * 2)


def test_an_all_greedy_batch_draws_no_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    races = []
    race = sampler_module.exponential_race
    monkeypatch.setattr(sampler_module, "exponential_race", lambda *args: races.append(1) or race(*args))
    ops_of([SamplingParams(temperature=0)] * 4)
    assert not races
    ops_of([SamplingParams(temperature=0), SamplingParams(temperature=1.0)])
    assert races == [1]


MIXED_PARAMS = [
    SamplingParams(temperature=0, logprobs=3),
    SamplingParams(temperature=0.8, top_k=50, logprobs=0),
    SamplingParams(temperature=1.2, top_p=0.8, logprobs=2, logprobs_mode="raw"),
    SamplingParams(temperature=1.0, min_p=0.05),
    SamplingParams(temperature=0.7, repetition_penalty=1.5, logprobs=1),
    SamplingParams(temperature=1.0, top_p=0.95, top_k=200, logprobs=4),
]


def assert_rows_independent(logits_seed: int) -> None:
    """Each row's token, logprob and top logprobs are bitwise those of the row sampled alone, and
    those of the row in a batch of another order: a row depends on nothing else in the batch."""
    logits = torch.randn(len(MIXED_PARAMS), VOCAB, generator=torch.Generator().manual_seed(logits_seed)) * 3
    batched = Sampler(seed=0)(logits, make_rows(MIXED_PARAMS, seed=10))
    order = list(reversed(range(len(MIXED_PARAMS))))
    shuffled_rows = [make_rows(MIXED_PARAMS, seed=10)[i] for i in order]
    shuffled = Sampler(seed=0)(logits[order], shuffled_rows)
    for i, row in enumerate(make_rows(MIXED_PARAMS, seed=10)):
        alone = Sampler(seed=0)(logits[i : i + 1], [row])
        j = order.index(i)
        assert batched.token_ids[i] == alone.token_ids[0] == shuffled.token_ids[j]
        assert batched.logprobs[i] == alone.logprobs[0] == shuffled.logprobs[j]
        assert batched.top_logprobs[i] == alone.top_logprobs[0] == shuffled.top_logprobs[j]


@pytest.mark.parametrize("logits_seed", [1, 2, 3])
def test_one_batched_call_equals_a_call_per_row(logits_seed: int) -> None:
    assert_rows_independent(logits_seed)


BASELINE_CPU = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}


@pytest.fixture(scope="session")
def baseline_cpu_kernels() -> None:
    """Our CPU kernels built for the baseline capability too (their flags follow ATen's; conftest.py
    builds only this machine's): once per session, before any test's time limit starts. A build takes
    a minute or more on 2 busy cores; the limit here only stops a hung compiler."""
    code = "from rollout.ops.cpu_kernels import load_cpu_kernels; load_cpu_kernels()"
    subprocess.run([sys.executable, "-c", code], env=BASELINE_CPU, cwd=REPO_ROOT, check=True, timeout=3600)


def test_rows_are_independent_with_the_baseline_cpu_kernels_and_two_threads(baseline_cpu_kernels) -> None:
    """ATen picks its vector kernels by CPU (AVX-512, AVX2, or the baseline these force); the promise
    holds whichever runs, with the ops split over two threads."""
    code = "import torch; torch.set_num_threads(2); from tests.engine.test_sampler import assert_rows_independent as a; [a(s) for s in (1, 2, 3)]"
    subprocess.run([sys.executable, "-c", code], env=BASELINE_CPU, cwd=REPO_ROOT, check=True, timeout=600)


def test_a_row_without_top_p_keeps_its_whole_support_beside_a_top_p_row() -> None:
    """The top token's rounded mass is 1.0 here, so a cumulative-mass cut at p = 1.0 would drop the
    tail: a row without top-p must not get the cut because another row asked for it."""
    logits = torch.full((2, VOCAB), -20.0)
    logits[:, 0] = 10.0
    rows = make_rows([SamplingParams(temperature=1.0, logprobs=VOCAB), SamplingParams(top_p=0.5)], seed=0)
    out = Sampler(seed=0)(logits, rows)
    tail = [v for t, v in out.top_logprobs[0].items() if t != 0]
    assert len(tail) == VOCAB - 1 and all(-31 < v < -29 for v in tail)


@pytest.mark.gpu
def test_host_syncs_do_not_grow_with_the_batch_on_cuda() -> None:
    def syncs(batch: int) -> int:
        device = torch.device("cuda")
        logits = torch.randn(batch, VOCAB, device=device)
        params = [SamplingParams(temperature=0.8, top_k=20, logprobs=2)] * batch
        rows = [SampleRow(p, 0, [5]) for p in params]
        sampler = Sampler(seed=0)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sampler(logits, rows)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return len(caught)

    assert syncs(64) == syncs(1)


def test_rows_without_top_k_do_not_widen_the_partial_topk() -> None:
    """Beside a top-k row, a row without top-k costs k = 1, not a sort of the whole vocabulary."""

    class TopkSizes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ks: list[int] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ == "topk":
                self.ks.append(args[1])
            return func(*args, **(kwargs or {}))

    logits = torch.randn(2, VOCAB, generator=torch.Generator().manual_seed(0))
    rows = make_rows([SamplingParams(top_k=20), SamplingParams(temperature=0.9)])
    with TopkSizes() as recorder:
        Sampler(seed=0)(logits, rows)
    assert recorder.ks == [20]
