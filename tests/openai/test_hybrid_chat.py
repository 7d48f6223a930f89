"""Multi-turn token-in chat through the OpenAI front end on hybrid and recurrent models: each turn resumes
from the state snapshot where the previous turn ended (prefix hits grow), and replies equal those of a
server with prefix caching off."""

from __future__ import annotations

import openai
import pytest

from tests.openai.openai_builders import hermes_tokenizer, openai_serving
from tests.server.hybrid_builders import HYBRIDS, hybrid_engine

BLOCK_SIZE = 16  # EngineConfig's default
USER = [{"role": "user", "content": "weather in Paris?"}]
SAMPLING = dict(max_tokens=20, seed=0, temperature=1.0)
TURNS = 3


def chat(model_type: str, prefix_caching: bool) -> tuple[list[list[int]], list[int], list[int]]:
    """(each turn's sampled tokens, the server's prefix-hit tokens after each turn, each turn's prompt and
    completion length)."""
    engine = hybrid_engine(model_type, tokenizer=hermes_tokenizer(), enable_prefix_caching=prefix_caching)
    messages, prefix, replies, hits, lengths = list(USER), None, [], [], []
    with openai_serving(engine) as (grpc_server, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        model = client.models.list().data[0].id
        for turn in range(TURNS):
            extra = {"ignore_eos": True, **({"prompt_token_ids": prefix} if prefix else {})}
            reply = client.chat.completions.create(
                model=model, messages=messages, extra_body=extra, **SAMPLING
            )
            tokens = reply.choices[0].model_extra["token_ids"]
            prefix = reply.model_extra["prompt_token_ids"] + tokens
            replies.append(tokens)
            lengths.append(len(prefix))
            hits.append(grpc_server.loop.stats()["num_prefix_hit_tokens"])
            messages += [reply.choices[0].message.model_dump(exclude_none=True)]
            messages += [{"role": "tool", "tool_call_id": f"c{turn}", "content": f"sunny {turn}"}]
    return replies, hits, lengths


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_each_token_in_turn_hits_the_prefix_cache_and_replies_as_without_it(model_type: str) -> None:
    replies, hits, lengths = chat(model_type, prefix_caching=True)
    uncached, no_hits, _ = chat(model_type, prefix_caching=False)
    assert replies == uncached and no_hits == [0] * TURNS and hits[0] == 0
    for turn in range(1, TURNS):  # turn k+1 resumes where turn k's computed tokens last crossed a block end
        assert hits[turn] - hits[turn - 1] == (lengths[turn - 1] - 1) // BLOCK_SIZE * BLOCK_SIZE
