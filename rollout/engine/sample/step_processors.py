"""What reshapes one step's logits before temperature, in the sampler's order: vLLM's logits processors
(processor_batch.py: logit_bias, the penalties, the bans), then the structured outputs' grammar masks
(grammar_mask.py, after the repetition penalty's clamp so that no mask turns finite again).

The sampler and the trainer-side replay (rollout/replay/) both build and apply it here, so the
distribution a trainer recomputes is the one the token was drawn from, by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollout.engine.sample.grammar_mask import GrammarMasks, grammar_masks
from rollout.engine.sample.processor_batch import ProcessorBatch, processor_batch


@dataclass(slots=True)
class StepProcessors:
    processors: ProcessorBatch | None
    grammar: GrammarMasks | None

    def apply(self, logits: torch.Tensor) -> None:
        """logits: [R, vocab] fp32, contiguous, written in place (a copy the caller owns)."""
        if self.processors is not None:
            self.processors.apply(logits)
        if self.grammar is not None:
            self.grammar.apply(logits)


def step_processors(
    rows: list, vocab: int, eos_token_ids: frozenset[int], device: torch.device
) -> StepProcessors | None:
    """The step's processors and masks; None when no row has any (the logits are used as they are)."""
    processors = processor_batch(rows, vocab, eos_token_ids, device)
    grammar = grammar_masks(rows, vocab, device)
    if processors is None and grammar is None:
        return None
    return StepProcessors(processors, grammar)
