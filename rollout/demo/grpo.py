"""The policy-gradient step of the demo: group-normalized advantages and an importance-weighted loss.

The behaviour policy is the server's sampled-token logprobs, exactly as TRL uses vLLM's: the ratio
exp(logp_trainer - logp_server) is 1 up to numerics when the server holds the trainer's weights, and
its drift is reported every round as a live check that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from rollout.outputs import RequestOutput


@dataclass(frozen=True)
class Sample:
    """One completion to learn from: its prompt and tokens, the server's logprobs, its advantage."""

    prompt_ids: list[int]
    token_ids: list[int]
    behaviour_logprobs: list[float]
    advantage: float


def group_advantages(rewards: list[float], eps: float = 1e-4) -> list[float]:
    """(r - mean) / (std + eps) within one prompt's group; all zeros when every sample scored the same."""
    mean = sum(rewards) / len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    return [(r - mean) / (std + eps) for r in rewards]


def collect_samples(outputs: list[RequestOutput], rewards: list[list[float]]) -> list[Sample]:
    """Samples with a non-zero advantage (a group where all agree teaches nothing) and >= 1 token."""
    samples = []
    for output, group in zip(outputs, rewards, strict=True):
        for completion, advantage in zip(output.outputs, group_advantages(group), strict=True):
            if completion.token_ids and abs(advantage) > 1e-6:
                samples.append(
                    Sample(
                        output.prompt_token_ids,
                        completion.token_ids,
                        completion.token_logprobs or [],
                        advantage,
                    )
                )
    return samples


def policy_loss(model: PreTrainedModel, samples: list[Sample], pad_id: int) -> tuple[torch.Tensor, float]:
    """Token-mean of -ratio * advantage over every completion token, in one padded forward pass.

    Returns the loss and the mean |logp_trainer - logp_server| over those tokens.
    """
    logp, mask = _completion_logprobs(model, samples, pad_id)
    behaviour = _padded([s.behaviour_logprobs for s in samples], logp.shape[1], 0.0)
    advantages = torch.tensor([s.advantage for s in samples])[:, None]
    ratio = torch.exp(logp - behaviour)
    loss = -(ratio * advantages * mask).sum() / mask.sum()
    drift = ((logp.detach() - behaviour).abs() * mask).sum() / mask.sum()
    return loss, drift.item()


def _completion_logprobs(
    model: PreTrainedModel, samples: list[Sample], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(token | prefix) for each completion token, right-padded: ([B, L], mask [B, L])."""
    sequences = [s.prompt_ids + s.token_ids for s in samples]
    width = max(len(seq) for seq in sequences)
    ids = _padded(sequences, width, pad_id, torch.long)
    attention = _padded([[1] * len(seq) for seq in sequences], width, 0, torch.long)
    logits = model(input_ids=ids, attention_mask=attention).logits.float()
    token_logp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]  # [B, width-1]
    completion_len = max(len(s.token_ids) for s in samples)
    rows = []
    for row, s in zip(token_logp, samples, strict=True):
        start = len(s.prompt_ids) - 1
        rows.append(
            torch.nn.functional.pad(
                row[start : start + len(s.token_ids)], (0, completion_len - len(s.token_ids))
            )
        )
    mask = _padded([[1.0] * len(s.token_ids) for s in samples], completion_len, 0.0)
    return torch.stack(rows), mask


def _padded(
    rows: list[list[float]] | list[list[int]], width: int, value: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=dtype)
