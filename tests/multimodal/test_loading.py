"""An image-text-to-text checkpoint loads from a path with its processor: the composite one where it builds
(LLaVA), else its image processor and tokenizer apart (Qwen2-VL's needs torchvision)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from rollout.multimodal.processor_parts import ImageTextProcessor
from tests.multimodal.qwen_vl_builders import (
    qwen_image_processor,
    qwen_processor,
    qwen_tokenizer,
    tiny_qwen_vl,
)
from tests.multimodal.vlm_builders import llava_processor, random_image, tiny_llava

PARAMS = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)


def greedy(llm: LLM, text: str) -> list[int]:
    prompt = {"prompt": text, "multi_modal_data": {"image": random_image(0)}}
    return llm.generate([prompt], PARAMS)[0].outputs[0].token_ids


def test_llava_loads_from_a_path_with_its_processor(tmp_path: Path) -> None:
    tiny_llava().save_pretrained(tmp_path)
    llava_processor().save_pretrained(tmp_path)
    loaded = LLM(str(tmp_path), config=EngineConfig(num_blocks=128))
    in_memory = LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    assert greedy(loaded, "ab<image>c") == greedy(in_memory, "ab<image>c")


def test_qwen2_vl_loads_its_processor_in_parts(tmp_path: Path) -> None:
    tiny_qwen_vl().save_pretrained(tmp_path)
    qwen_tokenizer().save_pretrained(tmp_path)
    qwen_image_processor().save_pretrained(tmp_path)
    loaded = LLM(str(tmp_path), config=EngineConfig(num_blocks=128))
    assert isinstance(loaded.engine.images.image_processor, type(qwen_image_processor()))
    in_memory = LLM(model=tiny_qwen_vl(), tokenizer=qwen_processor(), config=EngineConfig(num_blocks=128))
    text = "a<|vision_start|><|image_pad|><|vision_end|>b"
    assert greedy(loaded, text) == greedy(in_memory, text)
    assert isinstance(qwen_processor(), ImageTextProcessor)


def test_tensor_parallelism_is_refused_for_image_text_models(tmp_path: Path) -> None:
    tiny_llava().save_pretrained(tmp_path)
    llava_processor().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="tensor_parallel_size: image-text-to-text models run on one device"):
        LLM(str(tmp_path), config=EngineConfig(num_blocks=128, tensor_parallel_size=2))
