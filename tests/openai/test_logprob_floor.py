"""A top alternative a processor dropped has logprob -inf, which JSON cannot carry: chat and completions write
it as vLLM's floor, -9999.0 (serving_chat.py / serving_completion.py: max(logprob, -9999.0)), streamed or not,
instead of failing the request (it was a 400 "Out of range float values")."""

from __future__ import annotations

import openai

from tests.openai.openai_builders import openai_serving

MODEL = "LlamaForCausalLM"
ONLY = {"allowed_token_ids": [40], "ignore_eos": True}  # every other token is dropped: -inf when processed


def test_dropped_alternatives_are_written_as_vllms_floor() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        chat_body = dict(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            logprobs=True,
            top_logprobs=2,
            extra_body=ONLY,
        )
        chat = client.chat.completions.create(**chat_body)
        chunks = list(client.chat.completions.create(**chat_body, stream=True))
        completion = client.completions.create(
            model=MODEL, prompt=[5, 6], max_tokens=2, logprobs=2, extra_body=ONLY
        )
    for entry in chat.choices[0].logprobs.content:
        assert entry.logprob > -9999.0 and [t.logprob for t in entry.top_logprobs][1] == -9999.0
    streamed = [
        e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content
    ]
    assert [[t.logprob for t in e.top_logprobs] for e in streamed] == [
        [t.logprob for t in e.top_logprobs] for e in chat.choices[0].logprobs.content
    ]
    for top in completion.choices[0].logprobs.top_logprobs:
        assert sorted(top.values())[0] == -9999.0
