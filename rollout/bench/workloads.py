"""The two workloads every system runs: fixed lengths (ignore_eos) and GRPO-like variable lengths.

A GRPO round's completions end anywhere between a few tokens and the cap; static batching pays for
the longest row of the batch, continuous batching does not. Random-weight benchmark models almost
never sample their EOS, so the variable workload shifts the EOS logit (a bias on the output layer,
shared by every system's copy of the model) until a sample stops with probability about 2 / new per
token: lengths then spread roughly geometrically, about half the rows reaching the cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel


@dataclass(frozen=True)
class Workload:
    name: str  # "fixed" | "variable"
    prompts: list[list[int]]
    n: int
    new: int  # the cap on new tokens; with fixed lengths, every sample's exact length
    eos_token_id: int | None  # None: ignore EOS (fixed lengths)

    @property
    def description(self) -> str:
        lengths = [len(p) for p in self.prompts]
        ending = (
            f"exactly {self.new} new tokens (ignore_eos)"
            if self.eos_token_id is None
            else (f"up to {self.new} new tokens, EOS {self.eos_token_id} sampled")
        )
        return (
            f"{self.name}: {len(self.prompts)} prompts x n={self.n}, prompt {min(lengths)}-{max(lengths)} "
            f"tokens, {ending}"
        )


def model_eos_token_id(model: PreTrainedModel) -> int:
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = model.config.eos_token_id
    if isinstance(eos, list):
        eos = eos[0]
    if eos is None:
        raise ValueError("the variable-length workload needs a model with an eos_token_id")
    return int(eos)


@torch.no_grad()
def spread_lengths(model: PreTrainedModel, prompts: list[list[int]], new: int) -> float:
    """Adds a bias to the EOS logit so the mean stop probability at the prompts' ends is 2 / new;
    returns the bias. Every copy of the model made afterwards carries it."""
    eos = model_eos_token_id(model)
    head = model.get_output_embeddings()
    if head.bias is None:
        head.bias = torch.nn.Parameter(
            torch.zeros(head.out_features, dtype=head.weight.dtype, device=head.weight.device)
        )
    logits = torch.stack(
        [model(torch.tensor([p], device=head.weight.device)).logits[0, -1].float() for p in prompts[:8]]
    )
    others = torch.cat([logits[:, :eos], logits[:, eos + 1 :]], dim=1).logsumexp(-1)
    stop = 2.0 / new
    bias = math.log(stop / (1 - stop)) + (others - logits[:, eos]).mean().item()
    head.bias[eos] += bias
    return bias
