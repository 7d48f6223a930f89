"""State snapshots (hybrid prefix caching): kept at block boundaries, found through the block hashes,
copied on a hit, dropped with their block, past the cap, and on an update; exact block ids."""

from __future__ import annotations

import torch

from rollout.engine.block_manager import BlockManager
from rollout.engine.hybrid.state_pool import StatePool
from rollout.engine.hybrid.state_snapshots import StateSnapshots
from rollout.engine.requests.request import Request, Sequence
from rollout.sampling_params import SamplingParams
from tests.models.zoo import HYBRID, build

BLOCK = 4
_CONFIG = build(next(f for f in HYBRID if f.model_type == "qwen3_next"), 0).config


def make_block_manager(num_blocks: int = 16, capacity: int = 8) -> BlockManager:
    pool = StatePool(_CONFIG, capacity=8)
    return BlockManager(num_blocks, BLOCK, True, pool, StateSnapshots(pool, capacity))


def make_seq(tokens: list[int], seq_id: int, num_prompt_tokens: int | None = None) -> Sequence:
    request = Request(f"r{seq_id}", list(tokens), SamplingParams(), arrival=seq_id, weight_version=0)
    return Sequence(seq_id, request, list(tokens), num_prompt_tokens or len(tokens))


def recurrent_layer(bm: BlockManager) -> int:
    slot = bm.states.slot(-1, fresh=True)
    bm.states.release(-1)
    return next(i for i, layer in enumerate(slot.layers) if hasattr(layer, "conv_states"))


def state(bm: BlockManager, seq: Sequence) -> torch.Tensor:
    return bm.states.slot(seq.seq_id, fresh=False).layers[recurrent_layer(bm)].conv_states[0]


def compute(bm: BlockManager, seq: Sequence, num_new_tokens: int) -> None:
    """'Computes' `num_new_tokens` of `seq`: its state becomes the number of tokens computed."""
    bm.append_slots(seq, num_new_tokens)
    slot = bm.states.slot(seq.seq_id, fresh=seq.num_computed_tokens == 0)
    seq.num_computed_tokens += num_new_tokens
    slot.layers[recurrent_layer(bm)].conv_states[0] = torch.full((1, 2), float(seq.num_computed_tokens))
    bm.cache_full_blocks(seq)


def test_a_hit_resumes_from_the_last_hit_block_with_a_snapshot() -> None:
    bm = make_block_manager()
    first = make_seq(list(range(11)), 0)
    compute(bm, first, 6)  # chunk ends mid-block: no snapshot
    compute(bm, first, 2)  # ends on boundary 8: snapshot
    compute(bm, first, 3)
    bm.free(first)
    second = make_seq(list(range(11)) + [50, 51], 1)  # blocks 0, 1 hit; only block 1 has a snapshot
    assert bm.allocate_prefix(second) == 8 and second.block_table == [0, 1]
    assert torch.equal(state(bm, second), torch.full((1, 2), 8.0))
    third = make_seq(list(range(6)) + [60, 61, 62], 2)  # block 0 hits, but has no snapshot
    assert bm.allocate_prefix(third) == 0 and third.block_table == []


def test_a_hit_starts_from_its_own_copy_of_the_snapshot() -> None:
    bm = make_block_manager()
    first = make_seq(list(range(9)), 0)
    compute(bm, first, 8)
    compute(bm, first, 1)
    bm.free(first)
    second = make_seq(list(range(9)), 1)
    assert bm.allocate_prefix(second) == 8
    state(bm, second).add_(100.0)
    third = make_seq(list(range(9)), 2)
    assert bm.allocate_prefix(third) == 8
    assert torch.equal(state(bm, third), torch.full((1, 2), 8.0))


def test_a_snapshot_goes_when_its_block_is_handed_out_again() -> None:
    bm = make_block_manager(num_blocks=3)
    first = make_seq(list(range(5)), 0)
    compute(bm, first, 4)  # block 0 full, snapshot at 4
    compute(bm, first, 1)
    bm.free(first)  # free queue: 2, 1, 0 (tail first)
    assert len(bm.snapshots) == 1
    other = make_seq([70 + i for i in range(12)], 1)
    bm.append_slots(other, 12)  # takes 2, 1 and then 0, evicting the cached block 0
    assert other.block_table == [2, 1, 0]
    assert len(bm.snapshots) == 0


def test_the_least_recently_used_snapshot_goes_past_the_cap() -> None:
    bm = make_block_manager(capacity=2)
    prompts = [[10 * p + i for i in range(5)] for p in range(3)]
    for seq_id, tokens in enumerate(prompts[:2]):
        seq = make_seq(tokens, seq_id)
        compute(bm, seq, 4)
        bm.free(seq)
    assert bm.allocate_prefix(make_seq(prompts[0], 10)) == 4  # prompt 0's snapshot is now the newest
    seq = make_seq(prompts[2], 2)
    compute(bm, seq, 4)  # a third: prompt 1's goes
    assert len(bm.snapshots) == 2
    assert bm.allocate_prefix(make_seq(prompts[1], 11)) == 0
    assert bm.allocate_prefix(make_seq(prompts[0], 12)) == 4


def test_a_decoding_sequence_keeps_its_latest_boundary_when_it_is_freed() -> None:
    bm = make_block_manager()
    seq = make_seq(list(range(14)), 0, num_prompt_tokens=3)  # 3 prompt tokens, then "generated" ones
    compute(bm, seq, 3)
    for _ in range(10):
        compute(bm, seq, 1)  # boundaries 4, 8, 12: each replaces the pending one
    assert len(bm.snapshots) == 0 and bm.snapshots.num_pending == 1
    bm.free(seq)
    assert len(bm.snapshots) == 1 and bm.snapshots.num_pending == 0
    turn = make_seq(list(range(14)) + [90, 91], 1)
    assert bm.allocate_prefix(turn) == 12
    assert torch.equal(state(bm, turn), torch.full((1, 2), 12.0))


def test_a_weight_update_drops_every_snapshot_and_no_hit_crosses_versions() -> None:
    bm = make_block_manager()
    first = make_seq(list(range(9)), 0)
    compute(bm, first, 8)
    running = make_seq(list(range(20, 27)), 1, num_prompt_tokens=3)
    compute(bm, running, 3)
    compute(bm, running, 1)  # pending at 4
    bm.free(first)
    bm.set_weight_version(1)
    assert len(bm.snapshots) == 0 and bm.snapshots.num_pending == 0
    bm.free(running)
    assert len(bm.snapshots) == 0
    assert bm.allocate_prefix(make_seq(list(range(9)), 2)) == 0


def test_pending_snapshots_count_against_the_cap() -> None:
    bm = make_block_manager(capacity=2)
    kept = make_seq(list(range(5)), 0)
    compute(bm, kept, 4)
    bm.free(kept)
    decoding = [make_seq([30 * (i + 1) + t for t in range(6)], i + 1, num_prompt_tokens=3) for i in range(3)]
    for seq in decoding:
        compute(bm, seq, 3)
        compute(bm, seq, 1)  # boundary 4, past the prompt: pending
    assert len(bm.snapshots) == 0 and bm.snapshots.num_pending == 2  # the kept one went; no room for a third


def test_a_snapshot_of_a_decode_stack_row_copies_that_row_only() -> None:
    """After a batched decode a slot's states are row views of the step's stack (stacked_states.py)."""
    bm = make_block_manager()
    seq = make_seq(list(range(5)), 0)
    compute(bm, seq, 4)
    stack = torch.arange(32.0).reshape(16, 2)
    state_view = stack[5:6]
    bm.states.slot(0, fresh=False).layers[recurrent_layer(bm)].conv_states[0] = state_view
    snapshot = bm.snapshots.take(0, None, (0, 1, 2, 3))
    copied = snapshot.states.layers[recurrent_layer(bm)].conv_states[0]
    assert torch.equal(copied, state_view) and copied.untyped_storage().nbytes() == 8
