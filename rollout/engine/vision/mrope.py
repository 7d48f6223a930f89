"""M-RoPE positions (Qwen2-VL, Qwen2.5-VL): three position rows (temporal, height, width) per token.

A prompt's rows come from the model's own `get_rope_index` over the whole prompt (its text counts up in all
three rows; an image's tokens take their grid coordinates), computed once per request: a chunk reads its
slice, so a chunk boundary inside an image changes nothing. A token after the prompt, at position p, gets
p + delta in every row (delta = the prompt's largest position + 1 - its length), as `generate` decodes.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from rollout.engine.requests.request import Request, Sequence


class MRopePositions:
    def __init__(self, model: PreTrainedModel, image_token_id: int) -> None:
        self.rope_index = model.model.get_rope_index  # the unmodified model's
        self.image_token_id = image_token_id

    def positions(self, items: list[tuple[Sequence, int]], position_ids: torch.Tensor) -> torch.Tensor:
        """[3, 1, T] for the packed step (`position_ids` [1, T], the 1-D positions of `items` in order)."""
        out = position_ids[None].expand(3, -1, -1).clone()
        offset = 0
        for seq, num_new_tokens in items:
            if seq.request.multi_modal is not None:
                table, delta = self._table(seq.request)  # [3, L], int
                start, end, length = (
                    seq.num_computed_tokens,
                    seq.num_computed_tokens + num_new_tokens,
                    table.shape[1],
                )
                inside = max(0, min(end, length) - start)
                out[:, 0, offset : offset + inside] = table[:, start : start + inside].to(out.device)
                out[:, 0, offset + inside : offset + num_new_tokens] += delta
            offset += num_new_tokens
        return out

    def _table(self, request: Request) -> tuple[torch.Tensor, int]:
        if request.mrope is None:
            mm = request.multi_modal
            ids = torch.tensor([mm.prompt_token_ids])
            types = (ids == self.image_token_id).to(torch.int32)
            grid = mm.encoder_inputs["image_grid_thw"]
            table, delta = self.rope_index(ids, mm_token_type_ids=types, image_grid_thw=grid)
            request.mrope = (table[:, 0].cpu(), int(delta.reshape(-1)[0]))
        return request.mrope
