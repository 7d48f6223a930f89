"""Scheduler: picks, each step, how many tokens each sequence computes under one token budget.

There are no phases. Every sequence is scheduled `min(pending tokens, budget left)` tokens: a
decoding sequence has one pending token, a prompt many (computed in chunks across steps). Decoding
sequences go first so a long prompt never starves them, then prompts already running, then new
arrivals. When blocks run out, the most recently admitted sequence is preempted by recompute: its
blocks are freed and it goes back to the front of the queue, keeping its tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rollout.config import EngineConfig
from rollout.engine.block_manager import BlockManager
from rollout.engine.hybrid.chunk_alignment import aligned_chunk
from rollout.engine.output.prompt_logprobs import needs_prompt_logits, prompt_positions
from rollout.engine.requests.request import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledSequence:
    seq: Sequence
    num_new_tokens: int
    # Positions of this step whose logits the runner also returns, before the sampling row, for
    # prompt logprobs (rollout/engine/output/prompt_logprobs.py); empty for nearly every sequence.
    prompt_rows: range = range(0)

    @property
    def samples(self) -> bool:
        """True when this step computes the sequence's last pending token, whose logits are sampled."""
        return self.seq.num_computed_tokens + self.num_new_tokens == self.seq.num_tokens


@dataclass(slots=True)
class SchedulerOutput:
    """The only thing the scheduler hands the model runner."""

    scheduled: list[ScheduledSequence] = field(default_factory=list)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)
    num_batched_tokens: int = 0
    weight_version: int = 0  # the version serving this step: image features older than it are recomputed

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


@dataclass(slots=True)
class SchedulerStats:
    num_prompt_tokens_computed: int = 0
    num_prefix_hit_tokens: int = 0
    num_preemptions: int = 0


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager) -> None:
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = SchedulerStats()

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """A forked sample joins the running set directly: it shares its parent's computed blocks."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(weight_version=self.block_manager.weight_version)
        budget = self.max_num_batched_tokens
        decoding = [s for s in self.running if s.num_pending_tokens == 1]
        prefilling = [s for s in self.running if s.num_pending_tokens > 1]
        preempted = False
        for seq in decoding + prefilling:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this step
            if self.block_manager.next_slot_is_owned(seq):  # most decodes: nothing to allocate or copy
                out.scheduled.append(ScheduledSequence(seq, 1))
                out.num_batched_tokens += 1
                budget -= 1
                continue
            num_new_tokens = self._chunk(seq, budget)
            if not self._make_room(seq, num_new_tokens, out):
                preempted = True
                continue
            budget -= self._schedule(seq, num_new_tokens, out)
        if not preempted:
            self._admit_waiting(budget, out)
        return out

    def finish(self, seq: Sequence) -> None:
        """Removes a sequence that finished or was aborted, freeing its blocks."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING and seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.FINISHED

    def _make_room(self, seq: Sequence, num_new_tokens: int, out: SchedulerOutput) -> bool:
        """Preempts the newest unscheduled running sequences until `seq` fits; False if `seq` itself went."""
        if self.block_manager.can_append(seq, num_new_tokens):
            return True  # the common case: no set of the step's sequences (quadratic in the batch)
        scheduled = {id(s.seq) for s in out.scheduled}
        while not self.block_manager.can_append(seq, num_new_tokens):
            victim = next((s for s in reversed(self.running) if id(s) not in scheduled), seq)
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def recompute(self, seqs: list[Sequence]) -> None:
        """Drops the KV of running `seqs` (kept tokens, as a preemption does) and requeues them first,
        in running order, so their KV is recomputed with the current weights."""
        chosen = {id(seq) for seq in seqs}
        for seq in reversed([s for s in self.running if id(s) in chosen]):
            self._requeue(seq)

    def _preempt(self, seq: Sequence) -> None:
        self._requeue(seq)
        self.stats.num_preemptions += 1

    def _requeue(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)

    def _admit_waiting(self, budget: int, out: SchedulerOutput) -> None:
        seats = sum(self._seats(s) for s in self.running)
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if seats + self._seats(seq) > self.max_num_seqs:
                break
            # cached blocks would skip computing positions whose prompt logprobs are still missing
            hit_tokens = 0 if needs_prompt_logits(seq) else self.block_manager.allocate_prefix(seq)
            num_new_tokens = self._chunk(seq, budget)
            if not self.block_manager.can_append(seq, num_new_tokens):
                self.block_manager.free(seq)
                seq.num_computed_tokens = 0
                break
            self.waiting.popleft()
            self.stats.num_prefix_hit_tokens += hit_tokens
            if seq.request.num_cached_tokens is None:
                seq.request.num_cached_tokens = hit_tokens
            seats += self._seats(seq)
            self.add_running(seq)
            budget -= self._schedule(seq, num_new_tokens, out)

    def _chunk(self, seq: Sequence, budget: int) -> int:
        """The tokens `seq` computes this step: all pending that fit; a hybrid model caching prefixes
        ends prefill chunks on block boundaries, where its states are snapshotted (chunk_alignment.py)."""
        num_new_tokens = min(seq.num_pending_tokens, budget)
        if self.block_manager.snapshots is None:
            return num_new_tokens
        bm = self.block_manager
        return aligned_chunk(seq.num_computed_tokens, num_new_tokens, seq.num_tokens, bm.block_size)

    def _schedule(self, seq: Sequence, num_new_tokens: int, out: SchedulerOutput) -> int:
        copy = self.block_manager.append_slots(seq, num_new_tokens)
        if copy is not None:
            out.blocks_to_copy.append(copy)
        out.scheduled.append(ScheduledSequence(seq, num_new_tokens, prompt_positions(seq, num_new_tokens)))
        out.num_batched_tokens += num_new_tokens
        return num_new_tokens

    @staticmethod
    def _seats(seq: Sequence) -> int:
        """A sample-0 sequence that has not forked yet holds seats for all of its request's samples."""
        return seq.request.num_seats if not seq.request.forked else 1
