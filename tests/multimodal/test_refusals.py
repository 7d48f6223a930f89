"""What is not served is refused by name: image-text families the engine has not made exact (at load,
with the reason), video and audio inputs, images for a text model, placeholders that do not pair up."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    SiglipVisionConfig,
)

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.multimodal.families import REFUSED, served_family
from tests.builders import tiny_llm
from tests.multimodal.vlm_builders import llava_processor, random_image, tiny_llava

TEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
TEXT.update(num_key_value_heads=2, vocab_size=128, max_position_embeddings=256)


def tiny_gemma3() -> Gemma3ForConditionalGeneration:
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)  # fmt: skip
    text = dict(TEXT, head_dim=16, model_type="gemma3_text")
    config = Gemma3Config(text_config=text, vision_config=vision.to_dict(), mm_tokens_per_image=4,
                          image_token_index=127, boi_token_index=125, eoi_token_index=126)  # fmt: skip
    torch.manual_seed(0)
    return Gemma3ForConditionalGeneration(config).eval()


def test_an_unserved_family_is_refused_at_load_by_name() -> None:
    with pytest.raises(UnsupportedModelError, match=r"model_type 'gemma3' is not served: .*bidirectional"):
        LLM(model=tiny_gemma3(), config=EngineConfig(num_blocks=64))


@pytest.mark.parametrize("model_type", sorted(REFUSED))
def test_every_refused_family_names_its_cause(model_type: str) -> None:
    with pytest.raises(
        ValueError, match=rf"model_type '{model_type}' is not served: {re.escape(REFUSED[model_type])}"
    ):
        served_family(SimpleNamespace(model_type=model_type))


def test_video_and_audio_inputs_are_refused_by_name() -> None:
    llm = LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    for modality in ("video", "audio"):
        prompt = {"prompt": "ab<image>", "multi_modal_data": {modality: b"..."}}
        with pytest.raises(
            ValueError, match=rf"prompts\[0\]\.multi_modal_data\.{modality}: {modality} inputs"
        ):
            llm.generate([prompt], SamplingParams(max_tokens=1))


def test_placeholders_must_pair_with_images() -> None:
    llm = LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    two = {"prompt": "ab<image>", "multi_modal_data": {"image": [random_image(0), random_image(1)]}}
    with pytest.raises(
        ValueError, match=r"prompts\[0\]\.multi_modal_data\.image: 2 image\(s\) but the prompt has 1"
    ):
        llm.generate([two], SamplingParams(max_tokens=1))
    corrupt = {"prompt": "ab<image>", "multi_modal_data": {"image": b"not an image"}}
    with pytest.raises(ValueError, match=r"prompts\[0\]\.multi_modal_data\.image: not a readable image"):
        llm.generate([corrupt], SamplingParams(max_tokens=1))
    assert llm.stats()["num_requests_finished"] == 0  # nothing was queued


def test_a_text_model_takes_no_images() -> None:
    llm = tiny_llm()
    prompt = {"prompt": [5, 6, 7], "multi_modal_data": {"image": random_image(0)}}
    with pytest.raises(ValueError, match=r"prompts\[0\]\.multi_modal_data: this model takes no images"):
        llm.generate([prompt], SamplingParams(max_tokens=1))


def test_placeholder_ids_without_images_are_refused() -> None:
    """A resumed or re-sent image prompt that lost its images would read the placeholders as text."""
    llm = LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    prompt = {"prompt": "ab<image>", "multi_modal_data": {"image": random_image(0)}}
    params = SamplingParams(max_tokens=3)
    expanded = llm.generate([prompt], params)[0].prompt_token_ids
    with pytest.raises(
        ValueError, match=r"prompt_token_ids: hold image placeholder tokens \(id 33\) but no images"
    ):
        llm.generate([expanded], params)
