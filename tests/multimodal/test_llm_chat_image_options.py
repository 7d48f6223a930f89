"""vLLM's `LLM.chat` options with image parts: "openai" content keeps the {"type": "image"} placeholders (the
same prompt as the default), "string" has no place for them and is refused by name, as is
`tokenization_kwargs` (truncating or padding would cut through the image's placeholder tokens); nothing runs."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.test_llm_chat_images import data_url
from tests.multimodal.vlm_builders import llava_processor, random_image, tiny_llava

ONE = SamplingParams(max_tokens=1, temperature=0.0)


def _messages() -> list[dict]:
    url = data_url(random_image(20))
    parts = [{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {"url": url}}]
    return [{"role": "user", "content": parts}]


def test_openai_content_keeps_the_image_placeholders_and_string_or_tokenization_kwargs_are_refused() -> None:
    llm = LLM(model=tiny_llava(), tokenizer=llava_processor(), config=EngineConfig(num_blocks=128))
    (plain,) = llm.chat(_messages(), ONE)
    (openai,) = llm.chat(_messages(), ONE, chat_template_content_format="openai")
    assert openai.prompt_token_ids == plain.prompt_token_ids and openai.prompt == plain.prompt
    with pytest.raises(ValueError, match="chat_template_content_format='string'"):
        llm.chat(_messages(), ONE, chat_template_content_format="string")
    with pytest.raises(ValueError, match="tokenization_kwargs: not supported with image parts"):
        llm.chat(_messages(), ONE, tokenization_kwargs={"truncation": True})
    assert llm.stats()["num_requests_finished"] == 1 + 1
