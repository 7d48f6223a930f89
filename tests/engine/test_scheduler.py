"""Scheduler properties: one token budget, decode first, chunking, seats for forks, preemption order."""

from rollout.config import EngineConfig
from rollout.engine.block_manager import BlockManager
from rollout.engine.requests.request import Request, Sequence
from rollout.engine.scheduler import Scheduler
from rollout.sampling_params import SamplingParams


def make_seq(seq_id: int, num_tokens: int, n: int = 1) -> Sequence:
    request = Request(
        f"r{seq_id}", list(range(num_tokens)), SamplingParams(n=n), arrival=seq_id, weight_version=0
    )
    seq = Sequence(seq_id, request, list(range(num_tokens)), num_tokens)
    request.sequences.append(seq)
    return seq


def make_scheduler(num_blocks: int = 64, **config: int) -> Scheduler:
    return Scheduler(EngineConfig(**config), BlockManager(num_blocks, 4))


def complete(sched, scheduler: Scheduler) -> None:
    """What the engine does after a step, minus sampling: computed catches up, and one token is appended."""
    for item in sched.scheduled:
        item.seq.num_computed_tokens += item.num_new_tokens
        if item.seq.num_computed_tokens == item.seq.num_tokens:
            item.seq.token_ids.append(0)


def test_long_prompt_is_chunked_under_the_token_budget() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=8)
    seq = make_seq(0, 20)
    scheduler.add(seq)
    chunks = []
    for _ in range(3):
        sched = scheduler.schedule()
        chunks.append(sched.scheduled[0].num_new_tokens)
        complete(sched, scheduler)
    assert chunks == [8, 8, 4]
    assert seq.block_table == [0, 1, 2, 3, 4]


def test_decoding_sequences_are_scheduled_before_a_running_prefill() -> None:
    scheduler = make_scheduler(max_num_batched_tokens=8)
    long_prompt, short = make_seq(0, 40), make_seq(1, 3)
    for seq, computed in ((long_prompt, 8), (short, 3)):  # running in this order
        scheduler.block_manager.append_slots(seq, computed)
        seq.num_computed_tokens = computed
        scheduler.add_running(seq)
    short.token_ids.append(7)  # short is decoding: one pending token
    sched = scheduler.schedule()
    assert [(item.seq, item.num_new_tokens) for item in sched.scheduled] == [(short, 1), (long_prompt, 7)]


def test_unforked_request_holds_seats_for_all_its_samples() -> None:
    scheduler = make_scheduler(max_num_seqs=8)
    scheduler.add(make_seq(0, 4, n=6))
    scheduler.add(make_seq(1, 4, n=4))
    sched = scheduler.schedule()
    assert [item.seq.seq_id for item in sched.scheduled] == [0]  # 6 + 4 seats > 8


def test_preemption_takes_the_newest_unscheduled_sequence_and_requeues_it_first() -> None:
    scheduler = make_scheduler(num_blocks=3)
    old, new = make_seq(0, 4), make_seq(1, 4)
    scheduler.add(old)
    scheduler.add(new)
    complete(scheduler.schedule(), scheduler)  # both admitted: blocks [0] and [1]
    sched = scheduler.schedule()  # each needs a second block; only one is free
    assert [item.seq for item in sched.scheduled] == [old]
    assert list(scheduler.waiting) == [new] and new.num_computed_tokens == 0 and new.block_table == []
    assert scheduler.stats.num_preemptions == 1
