"""GRPOTrainer's per-token logprobs under the processed policy (trained_policy.py): the trainer's own logits
with the server's sampling step replayed on them (rollout.replay.SamplerReplay), where TRL takes a
temperature-only log-softmax through its fused LM head.

Same contract as `GRPOTrainer._get_per_token_logps_and_entropies` (trl 1.16): (logps [B, T], entropies
[B, T] or None, aux_loss or None), 0 at masked positions, in chunks of `batch_size` sequences. The logits
of a chunk are materialized (TRL's fused head never does): the processors need every token's logit.
A row's prompt is its unpadded prompt_ids, its completion the tokens its completion mask keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from rollout.replay import SamplerReplay
from rollout.sampling_params import SamplingParams


def per_token_logps(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    replay: SamplerReplay,
    params: SamplingParams,
    autocast: Callable[[], AbstractContextManager],
    batch_size: int | None = None,
    compute_entropy: bool = False,
    compute_aux_loss: bool = False,
    **multimodal: Any,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    batch_size = batch_size or input_ids.size(0)
    images = _image_inputs(multimodal, batch_size < input_ids.size(0))
    logps, entropies, aux_losses = [], [], []
    for start in range(0, input_ids.size(0), batch_size):
        ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
        extra = {"output_router_logits": True} if compute_aux_loss else {}
        with autocast():
            outputs = model(
                input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1, **extra, **images
            )
        logits = outputs.logits[:, :-1]  # [b, T, vocab]: position t predicts completion token t
        chunk_logps, chunk_entropy = _replayed(
            logits, ids, mask, logits_to_keep, replay, params, compute_entropy
        )
        logps.append(chunk_logps)
        entropies.append(chunk_entropy)
        if compute_aux_loss:
            aux_losses.append(outputs.aux_loss)
    return (
        torch.cat(logps),
        torch.cat(entropies) if compute_entropy else None,
        torch.stack(aux_losses).mean() if compute_aux_loss else None,
    )


def _replayed(
    logits: torch.Tensor,
    ids: torch.Tensor,
    mask: torch.Tensor,
    length: int,
    replay: SamplerReplay,
    params: SamplingParams,
    compute_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """([b, T] logps, [b, T] entropies or None) of the completion tokens the mask keeps."""
    kept = mask[:, -length:].bool()  # [b, T]
    samples = [_sample(row_ids, row_mask, length) for row_ids, row_mask in zip(ids, mask, strict=True)]
    processed = replay.log_softmax(logits[kept], samples, params)  # [N, vocab], N = kept.sum()
    tokens = ids[:, -length:][kept]
    chosen = processed.gather(1, tokens[:, None])[:, 0]
    logps = torch.zeros(kept.shape, dtype=chosen.dtype, device=chosen.device).masked_scatter(kept, chosen)
    if not compute_entropy:
        return logps, None
    finite = processed.masked_fill(torch.isneginf(processed), 0.0)  # 0 * -inf would be NaN
    entropy = -(processed.exp() * finite).sum(-1)
    return logps, torch.zeros_like(logps).masked_scatter(kept, entropy)


def _sample(row_ids: torch.Tensor, row_mask: torch.Tensor, length: int) -> tuple[list[int], list[int]]:
    """(prompt, completion) token ids: the prompt left-padded, the completion right-padded (TRL's layout)."""
    prompt = row_ids[:-length][row_mask[:-length].bool()].tolist()
    completion_mask = row_mask[-length:].bool()
    count = int(completion_mask.sum())
    if not bool(completion_mask[:count].all()):
        raise ValueError("the completion mask has gaps: the replay needs each completion's tokens in order")
    return prompt, row_ids[-length:][:count].tolist()


def _image_inputs(multimodal: dict[str, Any], chunked: bool) -> dict[str, Any]:
    """The processor's image tensors for the model's forward (TRL's `num_images` is its own bookkeeping);
    images are taken in one chunk only: TRL slices them per chunk by image, which is not replayed here."""
    given = {name: value for name, value in multimodal.items() if value is not None}
    if given and chunked:
        raise NotImplementedError(
            f"the processed-policy replay takes image prompts ({sorted(given)}) in one chunk of sequences only"
        )
    return {name: value for name, value in given.items() if name != "num_images"}
