"""`LLM.chat(chat_template_content_format=...)` as vLLM (rollout/inputs/content_format.py): "string" joins a
message's text parts with newlines, "openai" gives the template a list of {"type": "text"} parts (a string
wrapped), "auto" picks "openai" when the template loops over a message's content. Oracle: transformers'
apply_chat_template on the messages vLLM's rule (chat_utils._parse_chat_message_content) writes."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from rollout.inputs.content_format import detect_content_format
from tests.builders import tiny_model, tool_chat_tokenizer

ONE = SamplingParams(max_tokens=1, temperature=0.0)
# Shows the content exactly as the template receives it.
AS_JSON = "{% for message in messages %}<{{ message.role }}>{{ message.content | tojson }}{% endfor %}"
LOOPS = (
    "{% set turns = messages %}{% for m in turns %}<{{ m.role }}>"
    "{% for part in m['content'] %}{{ part | tojson }}{% endfor %}{% endfor %}"
)
PARTS = [
    {"type": "text", "text": "first"},
    {"type": "input_text", "text": "plain"},
    {"type": "refusal", "refusal": "no"},
    {"type": "refusal", "refusal": None},  # no text: vLLM skips the part
]
ASSISTANT_CALL = {"role": "assistant", "content": None, "tool_calls": []}


def _llm() -> LLM:
    return LLM(
        model=tiny_model("llama", seed=3),
        tokenizer=tool_chat_tokenizer(),
        config=EngineConfig(num_blocks=128),
    )


def _rendered(messages: list[dict], template: str) -> list[int]:
    return tool_chat_tokenizer().apply_chat_template(
        messages, chat_template=template, add_generation_prompt=False, return_dict=False
    )


def _chat(messages: list[dict], template: str, fmt: str | None) -> list[int]:
    (out,) = _llm().chat(
        messages, ONE, chat_template=template, add_generation_prompt=False, chat_template_content_format=fmt
    )
    return out.prompt_token_ids


def test_string_joins_the_text_parts_with_newlines_and_none_becomes_empty() -> None:
    messages = [{"role": "user", "content": PARTS}, ASSISTANT_CALL]
    want = [{"role": "user", "content": "first\nplain\nno"}, {**ASSISTANT_CALL, "content": ""}]
    assert _chat(messages, AS_JSON, "string") == _rendered(want, AS_JSON)


def test_openai_wraps_text_as_text_parts_and_gives_none_an_empty_list() -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": PARTS}, ASSISTANT_CALL]
    text = [{"type": "text", "text": t} for t in ("first", "plain", "no")]
    want = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": text},
        {**ASSISTANT_CALL, "content": []},
    ]
    assert _chat(messages, AS_JSON, "openai") == _rendered(want, AS_JSON)


def test_auto_follows_the_template_and_none_passes_content_as_given() -> None:
    messages = [{"role": "user", "content": "hi"}]
    wrapped = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert _chat(messages, LOOPS, "auto") == _rendered(wrapped, LOOPS)  # the template loops over content
    assert _chat(messages, LOOPS, None) == _rendered(messages, LOOPS)  # as given: the loop walks the string
    assert _rendered(wrapped, LOOPS) != _rendered(messages, LOOPS)
    listed = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert _chat(listed, AS_JSON, "auto") == _rendered([{"role": "user", "content": "a\nb"}], AS_JSON)


@pytest.mark.parametrize(
    ("template", "fmt"),
    [
        (AS_JSON, "string"),
        (LOOPS, "openai"),
        (
            "{% for message in messages[1:] %}{% for c in message.content | list %}{{ c }}{% endfor %}{% endfor %}",
            "openai",
        ),
        (
            "{% for message in messages %}{% for c in other.content %}{{ c }}{% endfor %}{% endfor %}",
            "string",
        ),
        ("{% for x in messages %}{{ x.content }}{% endfor %}{% for c in content %}{% endfor %}", "string"),
    ],
)
def test_auto_detection_reads_the_template_as_vllm(template: str, fmt: str) -> None:
    assert detect_content_format(template) == fmt


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="chat_template_content_format"):
        _llm().chat([{"role": "user", "content": "hi"}], ONE, chat_template_content_format="json")
