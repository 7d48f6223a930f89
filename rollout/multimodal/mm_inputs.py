"""MultiModalInputs: a prompt with its images, processed and ready for the engine.

Made off the engine loop (image_prompt.py) and carried by the request: the prompt ids with every image's
placeholder expanded to one token per image feature, what the vision encoder takes (the image processor's
tensors), each image's content hash and the prompt positions its features fill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True, eq=False)
class MultiModalInputs:
    prompt_token_ids: list[int]  # placeholders expanded
    encoder_inputs: dict[str, torch.Tensor]  # the image processor's tensors (pixel_values, image_sizes, ...)
    image_hashes: tuple[str, ...]  # one per image, in prompt order (image_hash.py)
    image_spans: tuple[tuple[int, int], ...]  # [start, end): the prompt positions of each image's tokens
    # [N] int64: the prompt positions that take image features, in the order the encoder returns features
    feature_positions: torch.Tensor

    @property
    def num_images(self) -> int:
        return len(self.image_hashes)

    def cache_keys(self, start: int, end: int) -> tuple[str, ...]:
        """The hashes of the images whose tokens lie in prompt positions [start, end): a prefix-cache block
        over them is keyed by its images as well as its token ids."""
        return tuple(
            h for h, (s, e) in zip(self.image_hashes, self.image_spans, strict=True) if s < end and start < e
        )
