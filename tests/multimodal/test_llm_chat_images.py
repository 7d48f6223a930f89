"""`LLM.chat` with images: OpenAI `image_url` parts (data URLs) and PIL images in `image` parts, rendered by
the chat template with the model's placeholder, served as transformers serves the processor's inputs."""

from __future__ import annotations

import base64
import io

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import tiny_llm
from tests.multimodal.test_llava_engine import hf_greedy
from tests.multimodal.vlm_builders import llava_processor, random_image, reference_llava, tiny_llava


def data_url(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_chat_image_parts_equal_the_processors_inputs() -> None:
    model = tiny_llava()
    reference = reference_llava(model)
    llm = LLM(model=model, tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    first, second = random_image(20), random_image(21)
    messages = [
        {"role": "user", "content": [
            {"type": "text", "text": "ab"},
            {"type": "image_url", "image_url": {"url": data_url(first)}},
            {"type": "text", "text": "c"},
            {"type": "image", "image": second},
        ]},
    ]  # fmt: skip
    out = llm.chat(messages, SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))[0]
    processor = llava_processor()
    placeholders = [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image"},
                                                 {"type": "text", "text": "c"}, {"type": "image"}]}]  # fmt: skip
    text = processor.apply_chat_template(placeholders, add_generation_prompt=True, tokenize=False)
    assert out.prompt_token_ids == processor(images=[first, second], text=text)["input_ids"][0]
    assert out.outputs[0].token_ids == hf_greedy(reference, processor, text, [first, second], 6)


def test_chat_image_parts_are_refused_on_a_text_model() -> None:
    llm = tiny_llm()
    llm.engine.tokenizer = llava_processor().tokenizer
    messages = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(random_image(0))}}]}
    ]
    with pytest.raises(
        ValueError, match=r"messages\[0\]\.content\[0\]: 'image_url' parts are not served here"
    ):
        llm.chat(messages, SamplingParams(max_tokens=1))


def test_http_image_urls_are_refused_without_the_fetch_flag() -> None:
    llm = LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    messages = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]}
    ]
    with pytest.raises(
        ValueError, match=r"messages\[0\]\.content\[0\]: http\(s\) image URLs are not fetched"
    ):
        llm.chat(messages, SamplingParams(max_tokens=1))
