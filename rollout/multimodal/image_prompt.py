"""ImagePrompts: a prompt's token ids and its images -> MultiModalInputs, as the model's processor makes them.

The image processor turns the images into the encoder's tensors; each image's placeholder token is then
expanded to one token per feature it will receive (families.py counts them; Pixtral's layout adds its row
breaks), which is what the composite processor (LlavaProcessor, ...) does to the text before tokenizing. Driving the two parts directly works
where the composite processor cannot be built (Qwen2VLProcessor needs torchvision for its video half).
Prompts whose placeholders are already expanded are taken as they are. Runs off the engine loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image

from rollout.multimodal.families import ImageFamily, image_token_id, served_family
from rollout.multimodal.image_hash import hash_image
from rollout.multimodal.mm_inputs import MultiModalInputs


class ImagePrompts:
    def __init__(self, config: Any, image_processor: Any, tokenizer: Any = None) -> None:
        self.family: ImageFamily = served_family(config)
        self.config = config
        self.image_processor = image_processor
        self.image_token_id = image_token_id(config)
        self.tokenizer = tokenizer  # spells a layout's other tokens (Pixtral's row breaks, Idefics3's tiles)

    def build(
        self, prompt_token_ids: list[int], images: Sequence[Image.Image], field: str
    ) -> MultiModalInputs:
        """ValueError naming `field` when the placeholders and the images do not pair up."""
        if not images:
            raise ValueError(f"{field}: no images given")
        if self.image_processor is None:
            raise ValueError(f"{field}: the model has no image processor, so its images cannot be prepared")
        options = self.family.image_kwargs(self.config)
        processed = self.image_processor(images=list(images), return_tensors="pt", **options)
        encoder_inputs = {k: processed[k] for k in self.family.encoder_keys if k in processed}
        counts = self.family.tokens_per_image(self.config, processed)
        layouts = self._layouts(processed, counts, field)
        ids, spans = self._expand(prompt_token_ids, counts, layouts, field)
        positions = [p for start, end in spans for p in range(start, end) if ids[p] == self.image_token_id]
        return MultiModalInputs(
            prompt_token_ids=ids,
            encoder_inputs=encoder_inputs,
            image_hashes=tuple(hash_image(image) for image in images),
            image_spans=tuple(spans),
            feature_positions=torch.tensor(positions, dtype=torch.int64),
        )

    def _layouts(self, processed: dict, counts: list[int], field: str) -> list[list[int]]:
        """Each image's expanded ids: its layout (with the family's other tokens), or counts[i] placeholders."""
        if self.family.layout is None:
            return [[self.image_token_id] * count for count in counts]
        if self.tokenizer is None:
            raise ValueError(f"{field}: {self.family.model_type}'s image layout needs the model's tokenizer")
        return self.family.layout(self.config, processed, self.image_token_id, self.tokenizer)

    def _expand(
        self, ids: list[int], counts: list[int], layouts: list[list[int]], field: str
    ) -> tuple[list[int], list[tuple[int, int]]]:
        """Each lone placeholder becomes its image's layout; an already expanded prompt is split by counts."""
        token = self.image_token_id
        found = sum(1 for t in ids if t == token)
        if found == sum(counts) and found != len(counts):  # expanded already (or one token per image)
            return list(ids), _runs_by_count(ids, token, counts)
        if found != len(counts):
            raise ValueError(
                f"{field}: {len(counts)} image(s) but the prompt has {found} image placeholder token(s) "
                f"(id {token}); put one placeholder per image where it belongs in the prompt"
            )
        out: list[int] = []
        spans: list[tuple[int, int]] = []
        images = iter(layouts)
        for t in ids:
            if t == token:
                layout = next(images)
                spans.append((len(out), len(out) + len(layout)))
                out.extend(layout)
            else:
                out.append(t)
        return out, spans


def _runs_by_count(ids: list[int], token: int, counts: list[int]) -> list[tuple[int, int]]:
    """Each image's span over an expanded prompt: its counts[i] placeholder tokens, in order."""
    positions = [p for p, t in enumerate(ids) if t == token]
    spans, start = [], 0
    for count in counts:
        chunk = positions[start : start + count]
        spans.append((chunk[0], chunk[-1] + 1))
        start += count
    return spans
