"""Block manager: exact block ids, refcounts, LRU eviction order of cached prefixes, copy-on-write."""

from rollout.engine.block_manager import BlockManager
from rollout.engine.requests.request import Request, Sequence
from rollout.sampling_params import SamplingParams


def make_block_manager(num_blocks: int = 8, block_size: int = 4) -> BlockManager:
    return BlockManager(num_blocks, block_size)


def make_seq(tokens: list[int], seq_id: int = 0) -> Sequence:
    request = Request(f"r{seq_id}", list(tokens), SamplingParams(), arrival=seq_id, weight_version=0)
    return Sequence(seq_id, request, list(tokens), len(tokens))


def compute(bm: BlockManager, seq: Sequence) -> None:
    """Allocates and 'computes' every pending token of seq."""
    bm.append_slots(seq, seq.num_pending_tokens)
    seq.num_computed_tokens = seq.num_tokens
    bm.cache_full_blocks(seq)


def test_allocation_takes_the_lowest_free_ids_in_order() -> None:
    bm = make_block_manager()
    seq = make_seq(list(range(10)))
    compute(bm, seq)
    assert seq.block_table == [0, 1, 2]
    assert [bm.blocks[i].ref_cnt for i in range(4)] == [1, 1, 1, 0]
    assert bm.num_free_blocks == 5 and bm.num_cached_blocks == 2  # the partial block is not cached


def test_prefix_hit_shares_full_blocks_and_leaves_one_token_to_compute() -> None:
    bm = make_block_manager()
    first = make_seq(list(range(8)), 0)
    compute(bm, first)
    second = make_seq(list(range(8)), 1)
    assert bm.allocate_prefix(second) == 4  # 8 tokens cached, but the last block is recomputed
    assert second.block_table == [0] and bm.blocks[0].ref_cnt == 2
    third = make_seq(list(range(4)) + [99, 98, 97, 96, 95], 2)
    assert bm.allocate_prefix(third) == 4 and third.block_table == [0]


def test_freed_blocks_are_evicted_in_lru_order_tail_first() -> None:
    bm = make_block_manager(num_blocks=4)
    a = make_seq(list(range(8)), 0)
    compute(bm, a)  # blocks 0, 1 cached
    bm.free(a)  # freed tail first: queue is 2, 3, 1, 0
    assert list(bm.free_queue) == [2, 3, 1, 0]
    b = make_seq([50 + i for i in range(12)], 1)
    compute(bm, b)  # takes 2, 3, then evicts 1 (a's tail), keeps 0 (a's head)
    assert b.block_table == [2, 3, 1]
    assert bm.num_cached_blocks == 4  # b's 3 full blocks + a's head
    c = make_seq(list(range(8)), 2)
    assert bm.allocate_prefix(c) == 4 and c.block_table == [0]


def test_fork_shares_blocks_and_copies_only_the_partial_block_on_write() -> None:
    bm = make_block_manager()
    parent = make_seq(list(range(6)), 0)
    compute(bm, parent)  # blocks 0 (full), 1 (partial: 2 tokens)
    child = make_seq(list(range(6)), 1)
    child.num_computed_tokens = 6
    bm.fork(parent, child)
    assert child.block_table == [0, 1] and bm.blocks[0].ref_cnt == 2 and bm.blocks[1].ref_cnt == 2
    child.token_ids.append(7)
    assert bm.blocks_needed(child, 1) == 1
    assert bm.append_slots(child, 1) == (1, 2)  # copy partial block 1 into new block 2
    assert child.block_table == [0, 2] and bm.blocks[1].ref_cnt == 1
    parent.token_ids.append(8)
    assert bm.append_slots(parent, 1) is None  # the last owner writes in place
    bm.free(child)
    bm.free(parent)
    assert all(block.ref_cnt == 0 for block in bm.blocks) and bm.num_free_blocks == 8


def test_weight_version_change_makes_cached_blocks_unfindable() -> None:
    bm = make_block_manager()
    compute(bm, make_seq(list(range(9)), 0))
    bm.set_weight_version(1)
    assert bm.num_cached_blocks == 0
    assert bm.allocate_prefix(make_seq(list(range(9)), 1)) == 0


def test_the_decode_fast_path_takes_only_slots_that_need_no_block_and_no_copy() -> None:
    """next_slot_is_owned (the scheduler's shortcut) agrees with what append_slots would do."""
    bm = make_block_manager()
    seq = make_seq(list(range(6)))
    compute(bm, seq)  # 6 tokens in blocks [0, 1]; the next token goes to slot 2 of block 1
    seq.token_ids.append(6)
    assert bm.next_slot_is_owned(seq) and bm.blocks_needed(seq, 1) == 0
    child = make_seq(list(range(7)), 1)
    bm.fork(seq, child)  # block 1 now shared: the next write must copy it
    assert not bm.next_slot_is_owned(seq) and bm.blocks_needed(seq, 1) == 1
    full = make_seq(list(range(8)), 2)
    compute(bm, full)
    full.token_ids.append(8)  # the next token starts a new block
    assert not bm.next_slot_is_owned(full) and bm.blocks_needed(full, 1) == 1
    full.token_ids.append(9)  # two pending tokens: not a decode
    assert not bm.next_slot_is_owned(full)
