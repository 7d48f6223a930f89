"""ImageEmbeddings: a step's input embeddings, image features at the image tokens' positions.

The runner hands the model `inputs_embeds` instead of `input_ids` on a step that computes image tokens:
the language model's own token embeddings, with each image token's row replaced by its feature row, which
is what the model's forward does (`masked_scatter` over the placeholder mask). A chunk may start or end
inside an image: each position takes its own feature row. The encoder runs once per request, on all its
images as the processor batched them; the features stay on the request (its n samples and a preempted
recompute reuse them) and are recomputed when the weights changed since (an update may reach the tower).
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from rollout.engine.requests.request import Request, Sequence
from rollout.engine.vision.mrope import MRopePositions
from rollout.engine.vision.vision_model import check_image_model, encode_images
from rollout.multimodal.families import image_token_id


class ImageEmbeddings:
    def __init__(self, model: PreTrainedModel, mrope: bool) -> None:
        self.model = model
        self.embed_tokens = model.get_input_embeddings()
        self.mrope = MRopePositions(model, image_token_id(model.config)) if mrope else None
        self.num_encoder_runs = 0

    @classmethod
    def of(cls, model: PreTrainedModel) -> ImageEmbeddings | None:
        family = check_image_model(model)
        return cls(model, family.mrope) if family is not None else None

    def needed(self, items: list[tuple[Sequence, int]]) -> bool:
        """Whether the step computes an image token, or (M-RoPE) any token of a prompt with images."""
        if self.mrope is not None:
            return any(seq.request.multi_modal is not None for seq, _ in items)
        return any(_image_rows(seq, n)[1] for seq, n in items)

    def inputs(
        self,
        items: list[tuple[Sequence, int]],
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        version: int,
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The step's inputs_embeds (None without image tokens) and position ids (3-D with M-RoPE)."""
        embeds = (
            self.embed(items, input_ids, version) if any(_image_rows(s, n)[1] for s, n in items) else None
        )
        positions = self.mrope.positions(items, position_ids) if self.mrope is not None else position_ids
        return embeds, positions

    def embed(self, items: list[tuple[Sequence, int]], input_ids: torch.Tensor, version: int) -> torch.Tensor:
        """[1, T, hidden]: the packed step's embeddings (`input_ids` [1, T], in the order of `items`)."""
        ids = input_ids[0].clone()
        pieces: list[tuple[torch.Tensor, torch.Tensor]] = []
        offset = 0
        for seq, num_new_tokens in items:
            rows, count = _image_rows(seq, num_new_tokens)
            if count:
                mm = seq.request.multi_modal
                packed = mm.feature_positions[rows].to(ids.device) - seq.num_computed_tokens + offset
                pieces.append((packed, self._features(seq.request, version)[rows]))
                ids[packed] = 0  # overwritten below; a placeholder id may lie outside the text vocabulary
            offset += num_new_tokens
        embeds = self.embed_tokens(ids)
        for packed, features in pieces:
            embeds[packed] = features.to(device=embeds.device, dtype=embeds.dtype)
        return embeds[None]

    def _features(self, request: Request, version: int) -> torch.Tensor:
        cached = request.image_features
        if cached is not None and cached[0] == version:
            return cached[1]
        mm = request.multi_modal
        features = encode_images(self.model, mm.encoder_inputs)
        if features.shape[0] != mm.feature_positions.shape[0]:
            raise ValueError(
                f"request {request.request_id}: the vision encoder gave {features.shape[0]} feature rows for "
                f"{mm.feature_positions.shape[0]} image tokens"
            )
        self.num_encoder_runs += 1
        request.image_features = (version, features)
        return features


def _image_rows(seq: Sequence, num_new_tokens: int) -> tuple[slice, int]:
    """The feature rows of the image tokens among `seq`'s next `num_new_tokens` tokens, and their count."""
    mm = seq.request.multi_modal
    start = seq.num_computed_tokens
    if mm is None or start >= mm.image_spans[-1][1]:  # a text prompt, or past its last image: decodes
        return slice(0, 0), 0
    positions = mm.feature_positions
    first = int(torch.searchsorted(positions, start))
    last = int(torch.searchsorted(positions, start + num_new_tokens))
    return slice(first, last), last - first
