"""StateSnapshots: copies of recurrent states at block boundaries, so a hybrid model's prefix hit can resume.

A prefix hit skips computing the cached tokens; for a hybrid model that is exact only when the
recurrent state after those tokens is known. A snapshot is a copy of a sequence's states taken
between two steps, when its computed tokens end exactly on a block boundary, keyed by the prefix-cache
hash of the block that ends there (and verified, like the block, against its parent hash and tokens).
A hit resumes from the last hit block that has one, on its own copy. Policy (docs/hybrid_models.md):
prompt chunk ends are kept at once; a decoding sequence keeps only its latest boundary, pending, kept
when the sequence is freed (the end of a turn, which the next turn's prompt extends). At most
`capacity` exist, pending ones included, the least recently used kept one dropped first; one also
goes with its block, and all on a reset or a weight update.
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from rollout.config import EngineConfig
from rollout.engine.hybrid.state_pool import StatePool

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Snapshot:
    """The states after the block whose chained hash keys it; `parent_hash` and `token_ids` verify it."""

    parent_hash: int | None
    token_ids: tuple[int, ...]
    states: DynamicCache


class StateSnapshots:
    def __init__(self, pool: StatePool, capacity: int) -> None:
        self.pool = pool
        self.capacity = capacity
        self._kept: OrderedDict[int, Snapshot] = OrderedDict()  # block hash -> snapshot, LRU first
        self._pending: dict[int, tuple[int, Snapshot]] = {}  # seq id -> (block hash, its latest boundary)

    def __len__(self) -> int:
        return len(self._kept)

    def nbytes(self) -> int:
        """The bytes the kept snapshots' states take."""
        return sum(state_bytes(snapshot.states) for snapshot in self._kept.values())

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._kept

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    def take(self, seq_id: int, parent_hash: int | None, token_ids: tuple[int, ...]) -> Snapshot:
        """A copy of `seq_id`'s states now, which must be right after the block (`parent_hash`, `token_ids`)."""
        return Snapshot(parent_hash, token_ids, copy_states(self.pool.slot(seq_id, fresh=False)))

    def keep(self, block_hash: int, snapshot: Snapshot) -> None:
        self._kept[block_hash] = snapshot
        self._kept.move_to_end(block_hash)
        self._evict()

    def can_hold(self, seq_id: int) -> bool:
        """False when pending snapshots alone fill the cap (then `seq_id` takes none: no copy for nothing)."""
        return seq_id in self._pending or len(self._pending) < self.capacity

    def hold(self, seq_id: int, block_hash: int, snapshot: Snapshot) -> None:
        """Replaces `seq_id`'s pending snapshot (a decoding sequence keeps only its latest boundary)."""
        self._pending[seq_id] = (block_hash, snapshot)
        self._evict()

    def _evict(self) -> None:
        """Kept and pending snapshots together stay within the cap; the least recently used kept go."""
        while self._kept and len(self._kept) + len(self._pending) > self.capacity:
            self._kept.popitem(last=False)

    def settle(self, seq_id: int) -> tuple[int, Snapshot] | None:
        """Takes `seq_id`'s pending snapshot (it is being freed), or None."""
        return self._pending.pop(seq_id, None)

    def find(self, block_hash: int, parent_hash: int | None, token_ids: tuple[int, ...]) -> Snapshot | None:
        """The snapshot after the block (`block_hash`, `parent_hash`, `token_ids`), marked recently used."""
        snapshot = self._kept.get(block_hash)
        if snapshot is None or snapshot.parent_hash != parent_hash or snapshot.token_ids != token_ids:
            return None
        self._kept.move_to_end(block_hash)
        return snapshot

    def start_from(self, seq_id: int, snapshot: Snapshot) -> None:
        """`seq_id` continues from its own copy of `snapshot`: it never writes into the kept one."""
        self.pool.start_from(seq_id, copy_states(snapshot.states))

    def drop(self, block_hash: int) -> None:
        """The block `block_hash` names was handed out again: its snapshot can never be found."""
        self._kept.pop(block_hash, None)

    def clear(self) -> None:
        self._kept.clear()
        self._pending.clear()


def state_snapshots(config: EngineConfig, pool: StatePool | None, capacity: int) -> StateSnapshots | None:
    """The snapshot store of a hybrid model (`pool`) caching prefixes, `capacity` from the memory budget
    (state_budget.py); None when it has no use."""
    if pool is None or not config.enable_prefix_caching:
        return None
    if capacity == 0:
        if config.max_state_snapshots != 0:  # asked for caching, but the memory budget left no room
            logger.warning(
                "prefix caching is off for this hybrid model: the cache memory budget holds no state "
                "snapshot beside the running sequences' states (raise kv_cache_memory_gb or "
                "gpu_memory_utilization, or lower max_num_seqs)"
            )
        return None
    return StateSnapshots(pool, capacity)


def state_bytes(slot: DynamicCache) -> int:
    """The bytes of `slot`'s conv and recurrent states (a row view of a decode's stack counts its row)."""
    return sum(state.nbytes for state in state_tensors(slot))


def state_tensors(slot: DynamicCache) -> list[torch.Tensor]:
    """Every conv and recurrent state tensor of `slot` (attention layers have none here)."""
    out = []
    for layer in slot.layers:
        for states in (getattr(layer, "conv_states", None), getattr(layer, "recurrent_states", None)):
            out += [state for state in (states or {}).values() if state is not None]
    return out


def copy_states(slot: DynamicCache) -> DynamicCache:
    """A deep copy of `slot` whose every state tensor is a fresh one of its own size: a state that is a
    row view of a batched decode's stack (stacked_states.py) copies that row, not the stack."""
    memo: dict[int, object] = {id(state): state.clone() for state in state_tensors(slot)}
    return copy.deepcopy(slot, memo)
