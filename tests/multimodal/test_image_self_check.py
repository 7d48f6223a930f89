"""The load-time self-check runs with an image: an engine that got the image's features or its M-RoPE
positions wrong is refused at load, naming the image."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.vision.image_embeddings import ImageEmbeddings
from rollout.engine.vision.mrope import MRopePositions
from tests.multimodal.qwen_vl_builders import qwen_processor, tiny_qwen_vl
from tests.multimodal.vlm_builders import llava_processor, tiny_llava

REFUSED = r"with an image, the engine's forward differs from the model's own"


def test_the_served_families_pass_it() -> None:
    LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=64))
    LLM(model=tiny_qwen_vl(), tokenizer=qwen_processor(), config=EngineConfig(num_blocks=64))


def test_features_left_out_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageEmbeddings, "embed", lambda self, items, ids, version: self.embed_tokens(ids))
    with pytest.raises(UnsupportedModelError, match=REFUSED):
        LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=64))


def test_one_dimensional_positions_on_an_mrope_model_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    text_positions = lambda self, items, position_ids: position_ids[None].expand(3, -1, -1)  # noqa: E731
    monkeypatch.setattr(MRopePositions, "positions", text_positions)
    with pytest.raises(UnsupportedModelError, match=REFUSED):
        LLM(model=tiny_qwen_vl(), tokenizer=qwen_processor(), config=EngineConfig(num_blocks=64))
