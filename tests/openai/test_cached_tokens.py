"""`usage.prompt_tokens_details.cached_tokens` on every response: the prompt's prefix-cache hits.

vLLM's count (`Request.num_cached_tokens`): the tokens found in the prefix cache when the prompt is
first scheduled, whole blocks, never the last prompt token (its logits must be computed). Here a
repeated prompt on one server: the first sees 0, the second every full block before its last token.
"""

from __future__ import annotations

import openai

from rollout import SamplingParams
from rollout.client import RolloutClient
from tests.openai.openai_builders import openai_serving

BLOCK = 16  # the engine's default block size
MESSAGES = [{"role": "user", "content": "a long question about the weather in Paris, Lyon and Nice?"}]


def _full_blocks_before_last(prompt_len: int) -> int:
    return (prompt_len - 1) // BLOCK * BLOCK


def test_a_repeated_chat_prompt_reports_its_full_blocks_as_cached() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        args = dict(model="LlamaForCausalLM", messages=MESSAGES, max_tokens=4, seed=1)
        first = client.chat.completions.create(**args)
        second = client.chat.completions.create(**args)
        chunks = list(
            client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
        )
    prompt_len = first.usage.prompt_tokens
    assert prompt_len > 2 * BLOCK
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == _full_blocks_before_last(prompt_len)
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == _full_blocks_before_last(prompt_len)


def test_completions_sum_the_hits_of_their_prompts_and_grpc_reports_each() -> None:
    prompt = list(range(3, 3 + 2 * BLOCK + 5))  # 37 tokens: 2 full blocks before the last token
    other = list(range(40, 40 + BLOCK + 3))
    with openai_serving() as (grpc_server, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        args = dict(model="LlamaForCausalLM", max_tokens=2, temperature=0.0)
        cold = client.completions.create(prompt=[prompt, other], **args)
        warm = client.completions.create(prompt=[prompt, other], **args)
        with RolloutClient(grpc_server.address) as rpc:
            outs = rpc.generate([prompt, list(range(90, 90 + 20))], SamplingParams(max_tokens=2))
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    assert warm.usage.prompt_tokens_details.cached_tokens == 2 * BLOCK + BLOCK
    assert [o.num_cached_tokens for o in outs] == [2 * BLOCK, 0]
