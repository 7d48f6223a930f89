"""The engine loop's token events: a submission with stream=True gets each step's new tokens of its
samples (with their logprobs) before each finished sample; any other gets finished samples only."""

from __future__ import annotations

from rollout import SamplingParams
from rollout.server.engine_loop import EngineLoop
from rollout.server.handle import LoopEvent, Submission
from tests.server.server_builders import make_engine

PARAMS = SamplingParams(n=2, max_tokens=7, seed=3, logprobs=2)


def events_of(stream: bool) -> list[LoopEvent]:
    with EngineLoop(make_engine()).start() as loop:
        return list(loop.submit([Submission("r", [5, 6, 7, 8], PARAMS, stream=stream)]))


def test_a_streamed_sample_gets_every_token_but_its_last_before_the_sample_itself() -> None:
    events = events_of(stream=True)
    for index in range(PARAMS.n):
        final = next(i for i, e in enumerate(events) if any(s.index == index for s in e.samples))
        sample = next(s for s in events[final].samples if s.index == index)
        before = [t for e in events[:final] for t in e.tokens if t.sample_index == index]
        after = [t for e in events[final:] for t in e.tokens if t.sample_index == index]
        assert not after
        assert [t.position for t in before] == list(range(len(sample.token_ids) - 1))
        assert [t.token_id for t in before] == sample.token_ids[:-1]
        assert [t.logprob for t in before] == sample.token_logprobs[:-1]
        assert [t.top_logprobs for t in before] == sample.top_logprobs[:-1]


def test_a_streamed_request_gets_an_event_per_step_with_tokens_only() -> None:
    token_events = [e for e in events_of(stream=True) if e.tokens]
    assert len(token_events) >= PARAMS.max_tokens - 1  # one per step before the last
    assert all(not e.samples and not e.finished for e in token_events)


def test_an_unstreamed_request_gets_finished_samples_only() -> None:
    assert not any(e.tokens for e in events_of(stream=False))
