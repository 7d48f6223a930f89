"""The OpenAI front end takes `image_url` parts with data: URLs on an image-text-to-text model (a real HTTP
server on loopback); http(s) URLs, corrupt images and more images than the limit are a 400 naming the part."""

from __future__ import annotations

import httpx

from rollout.config import EngineConfig
from rollout.engine.llm_engine import LLMEngine
from rollout.multimodal.image_parts import ImageLimits
from tests.multimodal.test_llava_engine import hf_greedy
from tests.multimodal.test_llm_chat_images import data_url
from tests.multimodal.vlm_builders import llava_processor, random_image, reference_llava, tiny_llava
from tests.openai.openai_builders import openai_serving


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def chat(http, content: list, **body: object) -> httpx.Response:
    payload = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 5, **body}
    return httpx.post(f"{http.base_url}/chat/completions", json=payload, timeout=120)


def test_image_parts_are_served_and_bad_ones_are_named() -> None:
    model = tiny_llava()
    reference = reference_llava(model)
    engine = LLMEngine(model, llava_processor(), EngineConfig(num_blocks=128), model_name="m")
    image = random_image(30)
    with openai_serving(engine, image_limits=ImageLimits(max_images=1)) as (_, http):
        reply = chat(http, [{"type": "text", "text": "ab"}, image_part(data_url(image))], temperature=0.0,
                     ignore_eos=True)  # fmt: skip
        assert reply.status_code == 200, reply.text
        processor = llava_processor()
        placeholders = [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "image"}]}]
        text = processor.apply_chat_template(placeholders, add_generation_prompt=True, tokenize=False)
        assert reply.json()["choices"][0]["token_ids"] == hf_greedy(reference, processor, text, [image], 5)

        refused = {
            "messages[0].content[0]: http(s) image URLs are not fetched": [image_part("https://x.test/a.png")],
            "messages[0].content[1]: not a readable image": [
                {"type": "text", "text": "a"}, image_part("data:image/png;base64,aGVsbG8="),
            ],
            "messages: 2 images, more than the 1": [image_part(data_url(image)), image_part(data_url(image))],
        }  # fmt: skip
        for message, content in refused.items():
            reply = chat(http, content)
            assert reply.status_code == 400, reply.text
            assert message in reply.text
