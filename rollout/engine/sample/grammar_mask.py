"""Structured outputs in the sampler: each row with a grammar keeps only the tokens its grammar allows next.

Applied with the bans, before temperature and truncation, so "processed" logprobs and the kept mass
describe the masked distribution (a masked token's processed logprob is -inf). The mask is also part
of "raw" logprobs, as in vLLM, whose model runner masks the logits before its sampler sees them.
Rows without a grammar are not touched, so their results stay bit for bit what they are alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollout.ops.host_to_device import to_device

_BITS = torch.arange(32, dtype=torch.int32)


@dataclass(slots=True)
class GrammarMasks:
    """The allowed tokens of one step's rows with a grammar."""

    active: list[int]  # the rows with a grammar
    allowed: torch.Tensor  # [A, vocab] bool on the logits' device, one row per active row
    num_rows: int

    def apply(self, logits: torch.Tensor) -> None:
        """logits: [R, vocab], written in place (a copy the caller owns; autograd follows it)."""
        if len(self.active) == self.num_rows:  # every row: one masked_fill, no gather or scatter
            logits.masked_fill_(~self.allowed, float("-inf"))
            return
        index = to_device(self.active, torch.int64, logits.device)
        logits[index] = logits[index].masked_fill(~self.allowed, float("-inf"))


def grammar_masks(rows: list, vocab: int, device: torch.device) -> GrammarMasks | None:
    """rows[i].grammar (anything with GrammarState's fill_bitmask, or None) fills row i's allowed tokens;
    None when no row has a grammar."""
    active = [i for i, row in enumerate(rows) if row.grammar is not None]
    if not active:
        return None
    # xgrammar's layout: int32 words, bit j of word w allows token 32 * w + j
    bitmask = torch.zeros((len(active), (vocab + 31) // 32), dtype=torch.int32)
    for j, i in enumerate(active):
        rows[i].grammar.fill_bitmask(bitmask, j)
    return GrammarMasks(active, unpack_bitmask(bitmask, vocab).to(device), len(rows))


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, words] int32 -> [rows, vocab] bool."""
    bits = (bitmask.unsqueeze(-1) >> _BITS) & 1  # [rows, words, 32]
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab].bool()
