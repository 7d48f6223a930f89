"""StatePool: the recurrent states (conv and SSM / linear-attention) of every running sequence.

Hybrid models interleave attention with recurrent layers (Gated DeltaNet, Mamba, short convolutions)
whose state after a token cannot be rebuilt from the KV cache. Each sequence that has computed
tokens owns a slot here: a transformers cache object built from the model's config, of which only
the recurrent layers are used (attention stays in the paged KV cache), so the states have exactly
the shapes, dtypes and update rules the model's own layers define. A prompt's n samples each get a
copy of the prompt's state at the fork (the KV blocks stay shared); a sequence that starts over
(first chunk, or recompute after a preemption or an update) gets a fresh slot, or a copy of a
snapshot after a prefix hit (state_snapshots.py); finished sequences give theirs back.
"""

from __future__ import annotations

import copy

from transformers import DynamicCache, PretrainedConfig

from rollout.engine.hybrid.stacked_states import own_storage


class StatePool:
    def __init__(self, config: PretrainedConfig, capacity: int) -> None:
        self._config = config
        self.capacity = capacity  # max_num_seqs: the scheduler never runs more sequences than this
        self._slots: dict[int, DynamicCache] = {}

    def __len__(self) -> int:
        return len(self._slots)

    def slot(self, seq_id: int, fresh: bool) -> DynamicCache:
        """The states of `seq_id`; `fresh` (its first computed token is in this step) starts them over."""
        if fresh or seq_id not in self._slots:
            if not fresh:
                raise KeyError(f"sequence {seq_id} resumes without recurrent state")
            if seq_id not in self._slots and len(self._slots) >= self.capacity:
                raise RuntimeError(f"state pool full: {self.capacity} slots (max_num_seqs) in use")
            self._slots[seq_id] = self.new_states()
        return self._slots[seq_id]

    def new_states(self) -> DynamicCache:
        """Empty states, as a sequence's first step gets them (the budget's probe measures one)."""
        return DynamicCache(config=self._config)

    def start_from(self, seq_id: int, states: DynamicCache) -> None:
        """`seq_id` starts from `states`, which become its own (a prefix hit's copy of a snapshot)."""
        if seq_id not in self._slots and len(self._slots) >= self.capacity:
            raise RuntimeError(f"state pool full: {self.capacity} slots (max_num_seqs) in use")
        self._slots[seq_id] = states

    def fork(self, parent_id: int, child_id: int) -> None:
        """`child_id` continues from `parent_id`'s state (a prompt's other samples, after its prefill)."""
        parent = self._slots[parent_id]
        own_storage(parent)  # a state left as a view of a batched decode's stack (stacked_states.py)
        self._slots[child_id] = copy.deepcopy(parent)

    def release(self, seq_id: int) -> None:
        self._slots.pop(seq_id, None)

    def clear(self) -> None:
        self._slots.clear()
