"""The self-check's schedule: which tokens of which checked sequence each engine step computes.

Every batch kind the scheduler makes is in it: a first prefill chunk, a continued chunk (crossing block
boundaries, continuing the KV and any recurrent state), one-token decode steps, decodes mixed with
another sequence's prefill chunks (the second sequence starts two steps later), and decodes of several
sequences in one step. Decode steps are most of the check: the engine decodes through paths a full
forward never takes (a recurrent layer's one-token update), and a sample is mostly decoded tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DECODE_STEPS = 6
FIRST_CHUNK = 3
STAGGER = 2  # steps the second sequence waits: its prefill runs beside the first one's decodes

KINDS = ("first prefill chunk", "continued prefill chunk", "decode step")


@dataclass(frozen=True)
class Piece:
    """Tokens [start, end) of sequence `seq` in one engine step."""

    seq: int
    start: int
    end: int

    @property
    def kind(self) -> str:
        if self.start == 0:
            return KINDS[0]
        return KINDS[2] if self.end - self.start == 1 else KINDS[1]


@dataclass(frozen=True)
class CheckPlan:
    seqs: list[list[int]]
    steps: list[list[Piece]]

    def kinds(self, seq: int) -> list[str]:
        """The kind of step each position of `seq` was computed in."""
        out = [""] * len(self.seqs[seq])
        for piece in (p for step in self.steps for p in step if p.seq == seq):
            out[piece.start : piece.end] = [piece.kind] * (piece.end - piece.start)
        return out


def check_plan(vocab: int, block_size: int, max_model_len: int | None, seed: int) -> CheckPlan:
    """Two random sequences (several blocks, and one block and a bit, plus the decode steps), scheduled."""
    limit = max(2, max_model_len or 2 * block_size + 3 + DECODE_STEPS)  # never past the served context
    lengths = [min(n + DECODE_STEPS, limit) for n in (2 * block_size + 3, block_size + 2)]
    generator = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, vocab, (n,), generator=generator).tolist() for n in lengths]
    plans = [[None] * (i * STAGGER) + _pieces(i, n) for i, n in enumerate(lengths)]
    steps = [
        [plan[step] for plan in plans if step < len(plan) and plan[step] is not None]
        for step in range(max(len(plan) for plan in plans))
    ]
    return CheckPlan(seqs, steps)


def _pieces(seq: int, length: int) -> list[Piece]:
    decodes = min(DECODE_STEPS, length - 1)
    prefill = length - decodes
    first = min(FIRST_CHUNK, prefill)
    chunks = [(0, first)] + ([(first, prefill)] if prefill > first else [])
    chunks += [(p, p + 1) for p in range(prefill, length)]
    return [Piece(seq, start, end) for start, end in chunks]
