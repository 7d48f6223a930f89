"""The batched logits processors (rollout/engine/sample/processor_batch.py) equal the row-by-row ones they
replaced (tests/engine/per_row_processors.py) bit for bit, with token counts kept across steps too, run a
fixed number of ops whatever the number of rows, and never write the caller's logits: property-based."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from rollout import SamplingParams
from rollout.engine.sample.processor_batch import processor_batch
from rollout.engine.sample.sampler import Sampler, SampleRow
from rollout.engine.sample.token_counts import TokenCounts
from tests.engine.per_row_processors import per_row_processed

VOCAB = 48
EOS = 2
EOS_IDS = frozenset({EOS})
TOKENS = st.integers(0, 11)  # a small alphabet: outputs repeat tokens and end with bad words' prefixes
IDS = st.integers(0, VOCAB - 1)
PENALTY = st.one_of(st.just(0.0), st.floats(-2.0, 2.0))
# logits a processor can meet: ordinary, signed zeros, the fp32 extremes, already banned
SPECIAL = st.sampled_from([0.0, -0.0, 3.0e38, -3.0e38, float("-inf"), 1e-30])


@st.composite
def sample_rows(draw) -> SampleRow:
    prompt = draw(st.lists(TOKENS, max_size=5))
    output = draw(st.lists(TOKENS, max_size=12))
    plain = draw(st.booleans())  # about half the rows ask for nothing: they must stay untouched
    params = SamplingParams(
        max_tokens=16,
        min_tokens=0 if plain else draw(st.integers(0, 16)),  # below and above the output's length
        presence_penalty=0.0 if plain else draw(PENALTY),
        frequency_penalty=0.0 if plain else draw(PENALTY),
        repetition_penalty=draw(st.sampled_from([1.0, 1.0, 0.5, 1.3, 2.0])),
        logit_bias=None if plain else draw(st.one_of(st.none(), st.dictionaries(IDS, st.floats(-100, 100)))),
        allowed_token_ids=None
        if plain
        else draw(st.one_of(st.none(), st.lists(IDS, min_size=1, max_size=8))),
        bad_words_token_ids=()
        if plain
        else draw(st.lists(st.lists(TOKENS, min_size=1, max_size=3), max_size=4)),
        stop_token_ids=draw(st.lists(IDS, max_size=2)),
        ignore_eos=draw(st.booleans()),
    )
    return SampleRow(params, 0, prompt + output, len(prompt))


@st.composite
def logits_for(draw, num_rows: int) -> torch.Tensor:
    seed = draw(st.integers(0, 2**31 - 1))
    logits = torch.randn(num_rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 8
    for _ in range(draw(st.integers(0, 6))):
        logits[draw(st.integers(0, num_rows - 1)), draw(TOKENS)] = draw(SPECIAL)
    return logits


def bits(logits: torch.Tensor) -> torch.Tensor:
    return logits.view(torch.int32)  # -0.0 and 0.0 differ here


def batched(logits: torch.Tensor, rows: list[SampleRow]) -> torch.Tensor:
    out = logits.clone()
    batch = processor_batch(rows, VOCAB, EOS_IDS, out.device)
    if batch is not None:
        batch.apply(out)
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.data())
def test_the_batched_processors_equal_the_row_by_row_ones_bit_for_bit(data: st.DataObject) -> None:
    rows = data.draw(st.lists(sample_rows(), min_size=1, max_size=6))
    logits = data.draw(logits_for(len(rows)))
    expected = per_row_processed(logits, rows, EOS_IDS)
    assert torch.equal(bits(batched(logits, rows)), bits(expected))


# What happens to a sequence's tokens between two steps: the engine's append, resume_into's extend, and
# a shrink of the output (the engine never samples such a list: the kept counts must start again).
EDITS = st.one_of(
    st.tuples(st.just("extend"), st.lists(TOKENS, min_size=1, max_size=1)),
    st.tuples(st.just("extend"), st.lists(TOKENS, min_size=2, max_size=8)),
    st.tuples(st.just("shrink"), st.integers(1, 6)),
)


def edit(row: SampleRow, change: tuple[str, object]) -> None:
    kind, arg = change
    if kind == "extend":
        row.seen_token_ids.extend(arg)
    else:
        del row.seen_token_ids[max(row.num_prompt_tokens, len(row.seen_token_ids) - arg) :]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(data=st.data())
def test_counts_kept_across_steps_give_the_row_by_row_processors_bits_at_every_step(
    data: st.DataObject,
) -> None:
    rows = data.draw(st.lists(sample_rows(), min_size=1, max_size=4))
    for row in rows:
        row.token_counts = TokenCounts()  # as the engine's sequences keep them
    for step in range(data.draw(st.integers(2, 6))):
        for row in rows if step else ():
            edit(row, data.draw(EDITS))
        logits = data.draw(logits_for(len(rows)))
        assert torch.equal(bits(batched(logits, rows)), bits(per_row_processed(logits, rows, EOS_IDS)))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(data=st.data())
def test_the_sampler_never_writes_the_callers_logits(data: st.DataObject) -> None:
    rows = data.draw(st.lists(sample_rows(), min_size=1, max_size=4))
    logits = data.draw(logits_for(len(rows)))
    before = logits.clone()
    Sampler(seed=0, eos_token_ids=EOS_IDS)(logits, rows)
    assert torch.equal(bits(logits), bits(before))


def test_rows_without_processors_build_nothing() -> None:
    rows = [SampleRow(SamplingParams(temperature=0.7, top_k=5), 0, [3, 4, 5], 1) for _ in range(3)]
    assert processor_batch(rows, VOCAB, EOS_IDS, torch.device("cpu")) is None


class OpCount(TorchDispatchMode):
    """Ops that compute (views only relabel memory: no kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


def test_the_number_of_ops_does_not_grow_with_the_rows() -> None:
    """On a GPU each op is a launch: the batched processors cost the same launches for 1 row or 64."""
    params = SamplingParams(
        max_tokens=32,
        min_tokens=20,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        repetition_penalty=1.2,
        logit_bias={11: 2.0, 12: -2.0},
        bad_words_token_ids=[[5], [6, 7]],
        allowed_token_ids=list(range(30)),
    )

    def ops(num_rows: int) -> int:
        rows = [SampleRow(params, 0, [1, 2, 3, 6, 6, 9, 6], 3) for _ in range(num_rows)]
        logits = torch.randn(num_rows, VOCAB)
        with OpCount() as counter:
            processor_batch(rows, VOCAB, EOS_IDS, logits.device).apply(logits)
        return counter.count

    assert ops(1) == ops(64)


def every_processor_rows(num_rows: int) -> list[SampleRow]:
    params = SamplingParams(
        temperature=0.8,
        logprobs=2,
        max_tokens=32,
        min_tokens=20,
        presence_penalty=0.5,
        frequency_penalty=-0.7,
        repetition_penalty=1.2,
        logit_bias={11: 2.0, 12: -2.0},
        bad_words_token_ids=[[5], [6, 7]],
        allowed_token_ids=list(range(30)),
    )
    return [SampleRow(params, i, [1, 2, 3, 6, 6, 9, 6, i % VOCAB], 3) for i in range(num_rows)]


@pytest.mark.gpu
def test_the_processors_make_no_host_sync_per_row_on_cuda() -> None:
    def syncs(num_rows: int) -> int:
        logits = torch.randn(num_rows, VOCAB, device="cuda")
        sampler, rows = Sampler(seed=0, eos_token_ids=EOS_IDS), every_processor_rows(num_rows)
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


@pytest.mark.gpu
def test_the_processors_give_the_same_bits_on_cuda_as_on_the_cpu() -> None:
    """Every op is IEEE-exact elementwise (one addition per logit, fp64 division, a cast) on both devices."""
    rows = every_processor_rows(16)
    logits = torch.randn(16, VOCAB, generator=torch.Generator().manual_seed(0)) * 8
    on_cuda = logits.cuda()
    processor_batch(rows, VOCAB, EOS_IDS, on_cuda.device).apply(on_cuda)
    assert torch.equal(bits(on_cuda.cpu()), bits(batched(logits, rows)))
