"""A row whose masks leave no token is flagged by the sampler, never drawn from, and changes nothing
for the other rows of the step (rollout/engine/sample/empty_rows.py)."""

from __future__ import annotations

import math

import torch

from rollout import SamplingParams
from rollout.engine.sample.empty_rows import guard_empty_rows
from rollout.engine.sample.sampler import Sampler, SampleRow
from tests.builders import VOCAB

EOS = 2
PROMPT = [5, 6, 7]


def _logits(rows: int) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(0)) * 3


def _sample(logits: torch.Tensor, params: list[SamplingParams]) -> tuple:
    rows = [SampleRow(p, 0, list(PROMPT), len(PROMPT)) for p in params]
    return Sampler(seed=0, eos_token_ids=frozenset({EOS}))(logits, rows)


# allowed_token_ids = {EOS} while min_tokens bans EOS: the sampler is handed an empty row (the engine's
# own check refuses this static case; with a grammar the same happens mid-sample)
EMPTY = SamplingParams(
    temperature=1.0, seed=1, logprobs=3, allowed_token_ids=(EOS,), min_tokens=2, max_tokens=4
)
BANNED = SamplingParams(temperature=1.0, seed=2, logprobs=3, bad_words_token_ids=((9,),))
PLAIN = SamplingParams(temperature=1.0, seed=3, logprobs=3)


def test_a_row_with_no_token_left_is_flagged_and_the_other_rows_draw_as_alone() -> None:
    logits = _logits(3)
    out = _sample(logits, [EMPTY, BANNED, PLAIN])
    assert out.empty_rows == [0]
    for i, params in ((1, BANNED), (2, PLAIN)):
        alone = _sample(logits[i : i + 1], [params])
        assert out.token_ids[i] == alone.token_ids[0]
        assert out.logprobs[i] == alone.logprobs[0] and out.top_logprobs[i] == alone.top_logprobs[0]
    assert all(math.isfinite(lp) for lp in out.logprobs[1:])


def test_the_callers_logits_are_not_written() -> None:
    logits = _logits(2)
    before = logits.clone()
    _sample(logits, [EMPTY, EMPTY])
    _sample(logits, [EMPTY, PLAIN])
    assert torch.equal(logits, before)


def test_rows_that_can_never_be_emptied_are_not_checked() -> None:
    """Plain and penalty-only rows keep the fast path: their logits untouched, no flags."""
    logits = _logits(2)
    params = [PLAIN, SamplingParams(temperature=1.0, presence_penalty=0.5)]
    rows = [SampleRow(p, 0, list(PROMPT), len(PROMPT)) for p in params]
    same, flags = guard_empty_rows(logits, rows, logits)
    assert same is logits and flags is None


def test_a_row_with_tokens_left_is_not_flagged() -> None:
    out = _sample(
        _logits(2), [BANNED, SamplingParams(allowed_token_ids=(EOS, 7), min_tokens=2, max_tokens=3)]
    )
    assert out.empty_rows == [] and out.token_ids[1] == 7
