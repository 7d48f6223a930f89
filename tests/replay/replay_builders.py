"""Samples drawn by the engine's own Sampler, step by step on given logits: the oracle the replay must equal.

Each step's logits are random (EOS pushed up so that min_tokens and the stop tokens matter), the row is
what the engine builds (the settings, prompt + output so far, the sample's grammar state), and the
sampler returns the processed logprob of the token it drew from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from rollout import SamplingParams
from rollout.engine.sample.sampler import Sampler, SampleRow
from rollout.structured_outputs.grammar_state import GrammarState

VOCAB = 64
EOS = 2
PROMPT = [5, 6, 7, 5, 9]


@dataclass(frozen=True)
class DrawnSample:
    prompt: list[int]
    completion: list[int]
    logits: torch.Tensor  # [T, vocab]: the logits each token was drawn from
    logprobs: list[float]  # the sampler's processed logprob of each token


def draw(
    params: SamplingParams,
    steps: int = 24,
    seed: int = 0,
    grammar: Any | None = None,
    vocab: int = VOCAB,
    prompt: list[int] = PROMPT,
) -> DrawnSample:
    """Up to `steps` tokens, ending at a stop token as the engine does (not with ignore_eos)."""
    params = replace(params, logprobs=0, seed=seed)
    sampler = Sampler(seed=0, eos_token_ids=frozenset({EOS}))
    generator = torch.Generator().manual_seed(seed)
    state = GrammarState(grammar) if grammar is not None else None
    seen, drawn, logprobs = list(prompt), [], []
    for _ in range(steps):
        logits = torch.randn(1, vocab, generator=generator) * 3
        logits[0, EOS] += 2.0
        out = sampler(logits, [SampleRow(params, 0, seen, len(prompt), state)])
        assert not out.empty_rows
        token = out.token_ids[0]
        if state is not None:
            assert state.accept(token)
        seen.append(token)
        drawn.append(logits[0])
        logprobs.append(out.logprobs[0])
        stops = {*params.stop_token_ids, *(() if params.ignore_eos else (EOS,))}
        if token in stops or (state is not None and state.finished):
            break
    return DrawnSample(list(prompt), seen[len(prompt) :], torch.stack(drawn), logprobs)
