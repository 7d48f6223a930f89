"""OpenAI's strict types and ranges, through the official client: a value of the wrong type or outside
OpenAI's range is 400 naming the field, never coerced (`true` read as 1, `"yes"` as true) nor clamped
(vLLM clamps `logit_bias`); the edges of each range are served."""

from __future__ import annotations

import openai

from tests.builders import VOCAB
from tests.openai.openai_builders import openai_serving

ARGS = {"model": "LlamaForCausalLM", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
# Each was served before (`max_tokens: true` as 1 token, `stream: "yes"` as a stream, a seed of any
# size, any bias), or named `logprobs` for a bad `top_logprobs`.
REFUSED = [
    ({"max_tokens": True}, "max_tokens"),
    ({"stream": "yes"}, "stream"),
    ({"n": 1.0}, "n"),
    ({"temperature": "0.5"}, "temperature"),
    ({"seed": 2**63}, "seed"),  # one past int64, OpenAI's and vLLM's bound
    ({"seed": 2**64 + 1}, "seed"),
    ({"logit_bias": {"5": 100.5}}, "logit_bias.5"),
    ({"logit_bias": {"5": -101}}, "logit_bias.5"),
    ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": VOCAB + 1}, "top_logprobs"),
]


def refused_param(client: openai.OpenAI, fields: dict) -> tuple[int, str | None]:
    try:
        client.chat.completions.create(**{**ARGS, **fields})
    except openai.BadRequestError as exc:
        return exc.status_code, exc.param
    return 200, None


def test_a_wrong_type_or_a_value_outside_openais_range_is_400_naming_the_field() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        got = [refused_param(client, fields) for fields, _ in REFUSED]
    assert got == [(400, param) for _, param in REFUSED]


def test_the_edges_of_each_range_are_served() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        top = client.chat.completions.create(
            **ARGS, seed=2**63 - 1, temperature=1.0, logprobs=True, top_logprobs=VOCAB
        )
        greedy = client.chat.completions.create(**ARGS, temperature=0.0).choices[0].model_extra["token_ids"]
        pushed = client.chat.completions.create(**ARGS, temperature=0.0, logit_bias={"5": 100})
        banned = client.chat.completions.create(**ARGS, temperature=0.0, logit_bias={str(greedy[0]): -100})
    assert len(top.choices[0].logprobs.content[0].top_logprobs) == VOCAB
    assert pushed.choices[0].model_extra["token_ids"] == [5, 5]  # +100 outweighs the tiny model's logits
    assert greedy[0] not in banned.choices[0].model_extra["token_ids"]
