"""BlockManager: reference-counted KV blocks, a free queue in LRU order, and the prefix cache.

A block is free when no sequence references it (`ref_cnt == 0`). A free block may still hold a
cached prefix: it stays findable by its hash until it is handed out again, and hand-out takes the
least recently freed block first, so cached prefixes are evicted in LRU order. Sequences free
their blocks tail first, which keeps the shared heads of prompts cached longest.

Cache keys chain: a block's hash covers its parent's hash, its tokens (and the content hashes of the
images among them) and the weight version, so a block computed under old weights can never match after
an update, nor a block over one image for the same placeholder ids over another. A hybrid model's hit also needs
the recurrent states after the hit blocks: it stops at the last one with a state snapshot
(hybrid/state_snapshots.py), and a snapshot goes when its block is handed out again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from rollout.config import EngineConfig
from rollout.engine.hybrid.state_budget import StateBudget
from rollout.engine.hybrid.state_pool import StatePool
from rollout.engine.hybrid.state_snapshots import StateSnapshots, state_snapshots
from rollout.engine.requests.request import Sequence


@dataclass(slots=True)
class Block:
    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    # What the hash covered, checked on every hit so a hash collision can never return wrong KV.
    parent_hash: int | None = None
    token_ids: tuple[int, ...] | None = None


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        states: StatePool | None = None,
        snapshots: StateSnapshots | None = None,
    ) -> None:
        self.block_size = block_size
        # A hybrid model's recurrent state is not in the blocks: a hit must resume from a snapshot of it.
        self.enable_prefix_caching = enable_prefix_caching and (states is None or snapshots is not None)
        self.states = states  # recurrent states follow the blocks: forked and freed with them
        self.snapshots = snapshots if self.enable_prefix_caching else None
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        self.weight_version = 0

    @classmethod
    def of(
        cls, config: EngineConfig, num_blocks: int, states: StatePool | None, budget: StateBudget
    ) -> BlockManager:
        """An engine's: the config's block size and prefix caching; a hybrid model's states, and snapshots
        of them up to the cap its memory budget allows."""
        snapshots = state_snapshots(config, states, budget.num_snapshots)
        return cls(num_blocks, config.block_size, config.enable_prefix_caching, states, snapshots)

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_cached_blocks(self) -> int:
        return len(self.cached)

    def blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        """Blocks `append_slots` would take: new ones, plus one if a shared partial block must be copied."""
        total = seq.num_computed_tokens + num_new_tokens
        needed = max(0, -(-total // self.block_size) - len(seq.block_table))
        return needed + int(self._first_write_is_shared(seq))

    def next_slot_is_owned(self, seq: Sequence) -> bool:
        """True when `seq` has exactly one pending token and its slot is in a block `seq` holds alone:
        scheduling it needs no block and no copy (the decode fast path)."""
        index, offset = divmod(seq.num_computed_tokens, self.block_size)
        return (
            len(seq.token_ids) - seq.num_computed_tokens == 1
            and offset != 0
            and index < len(seq.block_table)
            and self.blocks[seq.block_table[index]].ref_cnt == 1
        )

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.blocks_needed(seq, num_new_tokens) <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> tuple[int, int] | None:
        """Gives `seq` room for `num_new_tokens`; returns a (src, dst) block copy when copy-on-write applies."""
        copy = None
        if self._first_write_is_shared(seq):
            index = seq.num_computed_tokens // self.block_size
            src, dst = seq.block_table[index], self._allocate()
            self._release(src)
            seq.block_table[index] = dst
            copy = (src, dst)
        total = seq.num_computed_tokens + num_new_tokens
        while len(seq.block_table) * self.block_size < total:
            seq.block_table.append(self._allocate())
        return copy

    def allocate_prefix(self, seq: Sequence) -> int:
        """Takes the cached blocks matching the head of a block-less sequence; returns the hit tokens.

        At least one token is always left to compute, since sampling needs its logits.
        """
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.enable_prefix_caching:
            return 0
        hits, parent = [], None
        for index in range((seq.num_tokens - 1) // self.block_size):
            tokens = self._block_tokens(seq, index)
            block_id = self.cached.get(self._hash(parent, tokens))
            if block_id is None or not self._matches(self.blocks[block_id], parent, tokens):
                break
            hits.append(block_id)
            parent = self.blocks[block_id].block_hash
        if self.snapshots is not None:
            hits = self._resume_from_snapshot(seq, hits)
        for block_id in hits:
            self._take(block_id)
            seq.block_table.append(block_id)
            seq.block_hashes.append(self.blocks[block_id].block_hash)
        seq.num_computed_tokens = len(seq.block_table) * self.block_size
        return seq.num_computed_tokens

    def _resume_from_snapshot(self, seq: Sequence, hits: list[int]) -> list[int]:
        """A hybrid's hit ends at the last hit block with a state snapshot; `seq` starts from a copy of it."""
        for count in range(len(hits), 0, -1):
            block = self.blocks[hits[count - 1]]
            snapshot = self.snapshots.find(block.block_hash, block.parent_hash, block.token_ids)
            if snapshot is not None:
                self.snapshots.start_from(seq.seq_id, snapshot)
                return hits[:count]
        return []

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Registers the blocks of `seq` that became full of computed tokens in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        for index in range(len(seq.block_hashes), seq.num_computed_tokens // self.block_size):
            parent = seq.block_hashes[-1] if seq.block_hashes else None
            tokens = self._block_tokens(seq, index)
            block_hash = self._hash(parent, tokens)
            seq.block_hashes.append(block_hash)
            block = self.blocks[seq.block_table[index]]
            if block.block_hash is None and block_hash not in self.cached:
                block.block_hash, block.parent_hash, block.token_ids = block_hash, parent, tokens
                self.cached[block_hash] = block.block_id
        if self.snapshots is not None:
            self._snapshot_states(seq)

    def _snapshot_states(self, seq: Sequence) -> None:
        """At a block boundary, snapshots `seq`'s states: kept at once inside the prompt, else pending
        (only a decoding sequence's latest boundary, kept when it is freed: where its turn ended)."""
        count, offset = divmod(seq.num_computed_tokens, self.block_size)
        if offset != 0 or count == 0:
            return
        block_hash = seq.block_hashes[count - 1]
        in_prompt = seq.num_computed_tokens <= seq.num_prompt_tokens
        if in_prompt and (block_hash not in self.cached or block_hash in self.snapshots):
            return  # nobody could find it, or it is kept already (a repeated prompt's)
        if not in_prompt and not self.snapshots.can_hold(seq.seq_id):
            return
        parent = seq.block_hashes[count - 2] if count > 1 else None
        snapshot = self.snapshots.take(seq.seq_id, parent, self._block_tokens(seq, count - 1))
        if in_prompt:
            self.snapshots.keep(block_hash, snapshot)
        else:
            self.snapshots.hold(seq.seq_id, block_hash, snapshot)

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child shares every block of the parent; a shared partial block is copied on first write."""
        child.block_table = list(parent.block_table)
        child.block_hashes = list(parent.block_hashes)
        child.kv_version = parent.kv_version
        for block_id in child.block_table:
            self.blocks[block_id].ref_cnt += 1
        if self.states is not None:
            self.states.fork(parent.seq_id, child.seq_id)

    def free(self, seq: Sequence) -> None:
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table.clear()
        seq.block_hashes.clear()
        seq.kv_version = None
        if self.snapshots is not None:
            pending = self.snapshots.settle(seq.seq_id)
            if pending is not None and pending[0] in self.cached:  # not after a reset or an update
                self.snapshots.keep(*pending)
        if self.states is not None:  # finished, aborted or preempted: a recompute starts over
            self.states.release(seq.seq_id)

    def reset_prefix_cache(self) -> None:
        """Makes every cached block unfindable; blocks in use keep their KV and stay with their owners."""
        for block_id in self.cached.values():
            block = self.blocks[block_id]
            block.block_hash = block.parent_hash = block.token_ids = None
        self.cached.clear()
        if self.snapshots is not None:
            self.snapshots.clear()

    def set_weight_version(self, version: int) -> None:
        self.weight_version = version
        self.reset_prefix_cache()

    def _first_write_is_shared(self, seq: Sequence) -> bool:
        index, offset = divmod(seq.num_computed_tokens, self.block_size)
        return (
            offset != 0 and index < len(seq.block_table) and self.blocks[seq.block_table[index]].ref_cnt > 1
        )

    def _allocate(self) -> int:
        block_id, _ = self.free_queue.popitem(last=False)
        block = self.blocks[block_id]
        if block.block_hash is not None:
            del self.cached[block.block_hash]
            if self.snapshots is not None:
                self.snapshots.drop(block.block_hash)
            block.block_hash = block.parent_hash = block.token_ids = None
        block.ref_cnt = 1
        return block_id

    def _take(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_cnt == 0:
            del self.free_queue[block_id]
        block.ref_cnt += 1

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        assert block.ref_cnt > 0, f"block {block_id} released more often than taken"
        block.ref_cnt -= 1
        if block.ref_cnt == 0:
            self.free_queue[block_id] = None

    def _block_tokens(self, seq: Sequence, index: int) -> tuple[int | str, ...]:
        """The block's token ids, then the content hashes of the images among them: the same text with
        other images must never match (rollout/multimodal/image_hash.py)."""
        start, end = index * self.block_size, (index + 1) * self.block_size
        mm = seq.request.multi_modal
        return tuple(seq.token_ids[start:end]) + (mm.cache_keys(start, end) if mm is not None else ())

    def _hash(self, parent: int | None, tokens: tuple[int, ...]) -> int:
        return hash((parent, self.weight_version, tokens))

    @staticmethod
    def _matches(block: Block, parent: int | None, tokens: tuple[int, ...]) -> bool:
        return block.parent_hash == parent and block.token_ids == tokens
