"""A chat request that re-sends earlier assistant turns as text says whether its prompt still holds them
(`prefix_stable`, `prefix_break`): the templates that break the prefix invariant are flagged."""

from __future__ import annotations

import openai

from rollout.openai.requests.prefix_check import prefix_break
from rollout.protocol.prompts import tokenize_chat
from tests.openai.openai_builders import hermes_tokenizer, openai_serving
from tests.server.server_builders import make_engine

MODEL = "LlamaForCausalLM"
ASKED = {"role": "user", "content": "weather in Paris?"}
THOUGHT = {"role": "assistant", "reasoning_content": "need a tool", "content": "sunny"}
FOLLOW_UP = {"role": "user", "content": "and Rome?"}
TOOL_RESULT = {"role": "tool", "tool_call_id": "c1", "content": "rain"}
# Qwen3's habit: an assistant turn's reasoning is written only after the last user message.
DROPS_EARLIER_REASONING = (
    "{% set ns = namespace(last=0) %}{% for m in messages %}{% if m.role == 'user' %}"
    "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}<{{ m.role }}>{% if m.reasoning_content and loop.index0 > ns.last %}"
    "<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
TRIMS_CONTENT = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
# The generation prompt opens an empty think block that the history does not write back.
GENERATION_PROMPT_DIFFERS = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant><think></think>{% endif %}"
)


def check(template: str, messages: list[dict]) -> object:
    tokenizer = hermes_tokenizer()
    tokenizer.chat_template = template
    ids, text = tokenize_chat(tokenizer, messages)
    return prefix_break(tokenizer, messages, text, ids)


def test_a_template_that_drops_earlier_reasoning_after_a_new_user_turn_is_flagged_at_that_turn() -> None:
    found = check(DROPS_EARLIER_REASONING, [ASKED, THOUGHT, FOLLOW_UP])
    assert found is not None and found.message == 1 and "reasoning and content" in found.reason
    assert check(DROPS_EARLIER_REASONING, [ASKED, THOUGHT, TOOL_RESULT]) is None  # kept after a tool turn


def test_a_template_that_rewrites_the_assistants_content_is_flagged() -> None:
    spaced = {"role": "assistant", "content": " sunny "}
    assert check(TRIMS_CONTENT, [ASKED, spaced, FOLLOW_UP]).message == 1
    assert check(TRIMS_CONTENT, [ASKED, {"role": "assistant", "content": "sunny"}, FOLLOW_UP]) is None


def test_a_generation_prompt_the_history_does_not_write_back_is_flagged() -> None:
    found = check(GENERATION_PROMPT_DIFFERS, [ASKED, {"role": "assistant", "content": "sunny"}, FOLLOW_UP])
    assert found is not None and found.message == 1 and "prompt differently" in found.reason


def test_the_reply_says_whether_re_sent_assistant_turns_kept_their_prefix() -> None:
    tokenizer = hermes_tokenizer()
    tokenizer.chat_template = DROPS_EARLIER_REASONING
    with openai_serving(make_engine(tokenizer=tokenizer)) as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")

        def reply(messages: list[dict], **extra: object) -> dict:
            return client.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=2, extra_body=extra
            ).model_extra

        first = reply([ASKED])
        broken = reply([ASKED, THOUGHT, FOLLOW_UP])
        stable = reply([ASKED, THOUGHT, TOOL_RESULT])
        token_in = reply([ASKED, THOUGHT, TOOL_RESULT], prompt_token_ids=[1, 5, 6])
    assert "prefix_stable" not in first  # a first turn re-sends nothing
    assert broken["prefix_stable"] is False and broken["prefix_break"]["message"] == 1
    assert stable["prefix_stable"] is True and "prefix_break" not in stable
    assert "prefix_stable" not in token_in  # token-in keeps the invariant by construction
