"""Forced tool calls through the official client: `tool_choice="required"` or a named function makes even a
random tiny model return calls that parse, name a tool and follow its parameters schema."""

from __future__ import annotations

import json

import openai
import pytest

from rollout import EngineConfig
from rollout.engine.llm_engine import LLMEngine
from tests.builders import tiny_model
from tests.openai.openai_builders import hermes_tokenizer, openai_serving

pytest.importorskip("xgrammar")
jsonschema = pytest.importorskip("jsonschema")

MODEL = "LlamaForCausalLM"
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time"}},  # no parameters: any JSON object
]
MESSAGES = [{"role": "user", "content": "weather in Paris?"}]
SCHEMAS = {"get_weather": WEATHER, "get_time": {"type": "object"}}


def _serving(**kwargs: object) -> object:
    """A random tiny model with room for the tools in its prompt (a character per token) and a few calls."""
    model = tiny_model("llama", 0, max_position_embeddings=1536)
    engine = LLMEngine(model, hermes_tokenizer(), EngineConfig(num_blocks=512, max_num_seqs=64))
    return openai_serving(engine, **kwargs)


def _ask(client: openai.OpenAI, **kwargs: object) -> object:
    defaults = {"temperature": 1.0, "seed": 3, "n": 6, "max_tokens": 1000}
    kwargs = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS, **defaults, **kwargs}
    return client.chat.completions.create(**kwargs)


def _check_calls(choice: object, names: set[str]) -> list[object]:
    calls = choice.message.tool_calls
    assert calls, f"no tool call parsed from {choice.message.content!r}"
    for call in calls:
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return calls


def test_required_gives_every_sample_of_a_random_model_a_call_that_parses_and_names_a_tool() -> None:
    with _serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        free = _ask(client)
        forced = _ask(client, tool_choice="required")
    assert not any(c.message.tool_calls for c in free.choices)  # unforced, the random model calls nothing
    for choice in forced.choices:
        _check_calls(choice, {"get_weather", "get_time"})
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None


def test_a_named_function_is_the_one_call_and_finishes_with_stop_as_openai() -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    with _serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = _ask(client, tool_choice=named)
    for choice in reply.choices:
        (call,) = _check_calls(choice, {"get_weather"})
        assert choice.finish_reason == "stop"  # OpenAI's and vLLM's for a named function


def test_parallel_tool_calls_false_allows_exactly_one_call() -> None:
    with _serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = _ask(client, tool_choice="required", parallel_tool_calls=False)
    assert all(len(_check_calls(c, set(SCHEMAS))) == 1 for c in reply.choices)


@pytest.mark.parametrize("parser", ["hermes", "llama3_json", "none"])
def test_the_grammar_is_the_spelling_the_servers_tool_parser_reads(parser: str) -> None:
    with _serving(tool_call_parser=parser) as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = _ask(client, tool_choice="required", n=2)
    opening = "<tool_call>" if parser == "hermes" else '{"name": '  # "none": llama3_json's spelling
    for choice in reply.choices:
        _check_calls(choice, set(SCHEMAS))
        sampled = hermes_tokenizer().decode(choice.model_extra["token_ids"], skip_special_tokens=True)
        assert sampled.startswith(opening)


# Writes calls as `<tool_call>{"name": "...", "arguments": {...}}</tool_call>` (no newlines, no separator), its
# arguments as given: forced calls must be sampled in this spelling, not the parser's usual one.
COMPACT_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% endif %}"
    '{% for call in m.tool_calls or [] %}<tool_call>{"name": "{{ call.function.name }}", "arguments": '
    "{{ call.function.arguments }}}</tool_call>{% endfor %}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def test_a_forced_call_is_sampled_in_the_chat_templates_own_spelling() -> None:
    tokenizer = hermes_tokenizer()
    tokenizer.chat_template = COMPACT_TEMPLATE
    model = tiny_model("llama", 0, max_position_embeddings=1536)
    engine = LLMEngine(model, tokenizer, EngineConfig(num_blocks=512, max_num_seqs=64))
    with openai_serving(engine, tool_call_parser="hermes") as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = _ask(client, tool_choice="required", n=3)
    for choice in reply.choices:
        calls = _check_calls(choice, set(SCHEMAS))
        sampled = tokenizer.decode(choice.model_extra["token_ids"], skip_special_tokens=True)
        written = "".join(
            f'<tool_call>{{"name": "{c.function.name}", "arguments": ' for c in calls[:1]
        )  # the template's opening, then the arguments as sampled
        assert sampled.startswith(written) and sampled.endswith("}</tool_call>")
        assert "</tool_call><tool_call>" in sampled or len(calls) == 1  # the template's (empty) separator


def test_a_streamed_forced_call_equals_the_non_streamed_one() -> None:
    with _serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        whole = _ask(client, tool_choice="required", n=1)
        chunks = list(_ask(client, tool_choice="required", n=1, stream=True))
    calls = [call for chunk in chunks for c in chunk.choices for call in (c.delta.tool_calls or [])]
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        (c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("kwargs", "param", "words"),
    [
        (
            {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name",
            "not among",
        ),
        ({"tool_choice": "required", "tools": None}, "tool_choice", "needs tools"),
        ({"tool_choice": "any"}, "tool_choice", "is not one of"),
        (
            {"tool_choice": "required", "response_format": {"type": "json_object"}},
            "tool_choice",
            "cannot be combined",
        ),
    ],
)
def test_a_choice_that_cannot_be_honoured_is_400_naming_the_field(
    kwargs: dict, param: str, words: str
) -> None:
    with _serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        if kwargs.get("tools", TOOLS) is None:
            kwargs = {k: v for k, v in kwargs.items() if k != "tools"}
            call = lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES, **kwargs)  # noqa: E731
        else:
            call = lambda: _ask(client, **kwargs)  # noqa: E731
        with pytest.raises(openai.BadRequestError, match=words) as caught:
            call()
    assert caught.value.body["param"] == param


def test_parameters_that_do_not_compile_are_400_naming_tools() -> None:
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "no-such-type"}}}]
    with _serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            _ask(client, tools=bad, tool_choice="required")
    assert caught.value.body["param"] == "tools", caught.value.body
