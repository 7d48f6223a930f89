"""Offline, as on both front ends: a lone surrogate (what JSON's "\\ud800" escape decodes to) is refused
naming its field before a tokenizer sees it (fast tokenizers raised a TypeError), and so is a chat
message no template renders truly."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import tiny_model, tool_chat_tokenizer

LONE = "a\ud800"


def _llm() -> LLM:
    return LLM(
        model=tiny_model("llama", seed=3), tokenizer=tool_chat_tokenizer(), config=EngineConfig(num_blocks=64)
    )


def test_a_lone_surrogate_in_a_prompt_or_a_message_is_a_value_error_naming_it() -> None:
    llm = _llm()
    with pytest.raises(ValueError, match=r"^prompts\[1\]: holds a lone surrogate \(U\+D800 at character 1\)"):
        llm.generate(["ok", LONE], SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match=r"^messages\[0\]\.content: holds a lone surrogate"):
        llm.chat([{"role": "user", "content": LONE}], SamplingParams(max_tokens=1))


def test_a_lone_surrogate_in_a_stop_string_or_a_bad_word_is_a_value_error_naming_it() -> None:
    """A stop string could never match decoded text; a bad word would reach the tokenizer."""
    with pytest.raises(ValueError, match="^stop: holds a lone surrogate"):
        SamplingParams(stop=["x", LONE])
    with pytest.raises(ValueError, match=r"^bad_words\[1\]: holds a lone surrogate"):
        SamplingParams(bad_words=["x", LONE])


def test_a_message_without_a_role_or_with_an_image_part_is_refused_offline() -> None:
    llm = _llm()
    with pytest.raises(ValueError, match=r"^messages\[0\]\.role: missing"):
        llm.chat([{"content": "hi"}], SamplingParams(max_tokens=1))
    image = {"type": "image", "url": "cat.png"}
    with pytest.raises(ValueError, match=r"^messages\[0\]\.content\[0\]: 'image' parts are not served"):
        llm.chat([{"role": "user", "content": [image]}], SamplingParams(max_tokens=1))
