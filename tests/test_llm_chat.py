"""`LLM.chat` renders conversations as the tokenizer's `apply_chat_template` does; text that already
starts with BOS gets no second one."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import CONVERSATION, TOOLS, tiny_model, tool_chat_tokenizer

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def _llm() -> LLM:
    return LLM(
        model=tiny_model("llama", seed=3),
        tokenizer=tool_chat_tokenizer(),
        config=EngineConfig(num_blocks=128),
    )


def _template_ids(messages: list[dict], tools: list | None = None) -> list[int]:
    tokenizer = tool_chat_tokenizer()
    return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_dict=False)


def test_chat_prompt_ids_equal_apply_chat_template_with_tools_and_tool_calls() -> None:
    (out,) = _llm().chat(CONVERSATION, GREEDY, tools=TOOLS)
    assert out.prompt_token_ids == _template_ids(CONVERSATION, TOOLS)
    assert out.prompt == tool_chat_tokenizer().apply_chat_template(
        CONVERSATION, tools=TOOLS, add_generation_prompt=True, tokenize=False
    )


def test_chat_takes_a_list_of_conversations_in_order() -> None:
    other = [{"role": "user", "content": "hi"}]
    outs = _llm().chat([CONVERSATION, other], GREEDY)
    assert [o.prompt_token_ids for o in outs] == [_template_ids(CONVERSATION), _template_ids(other)]


def test_chat_refuses_a_value_that_is_not_json_naming_its_field() -> None:
    with pytest.raises(ValueError, match=r"^messages\[1\]\.content: a set is not JSON"):
        _llm().chat([{"role": "user", "content": "hi"}, {"role": "user", "content": {"a"}}], GREEDY)


def test_a_rendered_chat_template_given_as_text_gets_one_bos_and_the_same_answer_as_chat() -> None:
    llm = _llm()
    text = tool_chat_tokenizer().apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    (as_text,) = llm.generate([text], GREEDY)
    (as_chat,) = llm.chat(CONVERSATION, GREEDY)
    assert as_text.prompt_token_ids == as_chat.prompt_token_ids == _template_ids(CONVERSATION)
    assert as_text.outputs[0].token_ids == as_chat.outputs[0].token_ids


def test_text_without_bos_still_gets_the_tokenizers_bos() -> None:
    (out,) = _llm().generate(["hello"], GREEDY)
    assert out.prompt_token_ids == tool_chat_tokenizer()("hello")["input_ids"]
    assert out.prompt_token_ids[:2] == [1, tool_chat_tokenizer().convert_tokens_to_ids("h")]
