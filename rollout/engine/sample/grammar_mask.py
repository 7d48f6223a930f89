"""Structured outputs in the sampler: each row with a grammar keeps only the tokens its grammar allows next.

Applied with the bans, before temperature and truncation, so "processed" logprobs and the kept mass
describe the masked distribution (a masked token's processed logprob is -inf). Rows without a grammar
are not touched, so their results stay bit for bit what they are alone.
"""

from __future__ import annotations

import torch

from rollout.engine.host_to_device import to_device

_BITS = torch.arange(32, dtype=torch.int32)


def apply_grammar_masks(logits: torch.Tensor, rows: list) -> None:
    """logits: [R, vocab], the sampler's own copy, written in place; rows[i].grammar (GrammarState | None)
    fills row i's allowed tokens."""
    active = [i for i, row in enumerate(rows) if row.grammar is not None]
    if not active:
        return
    vocab = logits.shape[1]
    # xgrammar's layout: int32 words, bit j of word w allows token 32 * w + j
    bitmask = torch.zeros((len(active), (vocab + 31) // 32), dtype=torch.int32)
    for j, i in enumerate(active):
        rows[i].grammar.fill_bitmask(bitmask, j)
    allowed = unpack_bitmask(bitmask, vocab).to(logits.device)  # [A, vocab]
    if len(active) == len(rows):  # every row: one masked_fill, no gather or scatter
        logits.masked_fill_(~allowed, float("-inf"))
        return
    index = to_device(active, torch.int64, logits.device)
    logits[index] = logits[index].masked_fill(~allowed, float("-inf"))


def unpack_bitmask(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, words] int32 -> [rows, vocab] bool."""
    bits = (bitmask.unsqueeze(-1) >> _BITS) & 1  # [rows, words, 32]
    return bits.reshape(bitmask.shape[0], -1)[:, :vocab].bool()
