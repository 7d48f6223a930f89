"""Token-in chat: each turn's prompt starts with the exact tokens of every earlier turn."""

from __future__ import annotations

import openai
import pytest

from tests.openai.openai_builders import chat_engine, hermes_tokenizer, openai_serving
from tests.server.server_builders import make_engine

MODEL = "LlamaForCausalLM"
USER = [{"role": "user", "content": "weather in Paris?"}]
SAMPLING = dict(model=MODEL, max_tokens=20, seed=0, extra_body={"ignore_eos": True})


def next_turn(
    client: openai.OpenAI, messages: list[dict], prefix: list[int] | None
) -> tuple[list[int], object]:
    """One turn; returns (the turn's prompt + completion tokens, the reply)."""
    extra = {**SAMPLING["extra_body"], **({"prompt_token_ids": prefix} if prefix is not None else {})}
    reply = client.chat.completions.create(messages=messages, **{**SAMPLING, "extra_body": extra})
    return reply.model_extra["prompt_token_ids"] + reply.choices[0].model_extra["token_ids"], reply


def test_each_turns_prompt_starts_with_every_earlier_turns_prompt_and_completion() -> None:
    messages, prefix, prompts, completions = list(USER), None, [], []
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        for turn in range(3):
            prefix, reply = next_turn(client, messages, prefix)
            prompts.append(reply.model_extra["prompt_token_ids"])
            completions.append(reply.choices[0].model_extra["token_ids"])
            messages += [reply.choices[0].message.model_dump(exclude_none=True)]
            messages += [{"role": "tool", "tool_call_id": f"c{turn}", "content": f"sunny {turn}"}]
    for earlier, completion, later in zip(prompts, completions, prompts[1:], strict=False):
        assert later[: len(earlier) + len(completion)] == earlier + completion
    # what turn 2 appended after turn 1's sampled tokens: the template's closing of the assistant
    # turn, the tool result and the generation prompt, tokenized on their own
    rest = hermes_tokenizer()("</assistant><tool>sunny 1</tool><assistant>", add_special_tokens=False)
    assert prompts[2][len(prompts[1]) + len(completions[1]) :] == rest["input_ids"]


def test_turn_k_plus_1_hits_the_prefix_cache_for_turn_ks_tokens() -> None:
    engine = chat_engine()
    with openai_serving(engine) as (grpc_server, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        tokens, reply = next_turn(client, list(USER), None)
        hits_before = grpc_server.loop.stats()["num_prefix_hit_tokens"]
        messages = [
            *USER,
            reply.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
        next_turn(client, messages, tokens)
        hits = grpc_server.loop.stats()["num_prefix_hit_tokens"] - hits_before
    block = engine.config.block_size
    reusable = (
        (len(tokens) - 1) // block * block
    )  # full blocks of turn k's tokens (its last one not yet computed)
    rate = hits / len(tokens)
    print(f"turn k+1 prefix hit: {hits} of turn k's {len(tokens)} tokens ({rate:.2f})")
    assert hits >= reusable


def test_a_template_that_rewrites_earlier_turns_is_refused_naming_messages() -> None:
    tokenizer = hermes_tokenizer()
    # marks the last message: appending a turn changes how the earlier one renders
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.last %}<last>{% endif %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>"
        "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    with openai_serving(make_engine(tokenizer=tokenizer)) as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        tokens, _ = next_turn(client, list(USER), None)
        messages = [*USER, {"role": "assistant", "content": "x"}, {"role": "user", "content": "and?"}]
        with pytest.raises(
            openai.BadRequestError, match="messages: the chat template renders the earlier turns"
        ):
            next_turn(client, messages, tokens)


def test_prompt_token_ids_without_an_assistant_turn_is_refused() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        with pytest.raises(openai.BadRequestError, match="must hold the assistant turn"):
            next_turn(client, list(USER), [1, 5, 6])
