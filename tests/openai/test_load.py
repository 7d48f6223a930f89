"""64 concurrent OpenAI clients, a gRPC client and a weight push on one server: no error, no mixed versions."""

from __future__ import annotations

import asyncio
import threading

import openai
import pytest

from rollout.client import RolloutClient
from rollout.sampling_params import SamplingParams
from tests.builders import tiny_model
from tests.openai.openai_builders import openai_serving

MESSAGES = [{"role": "user", "content": "weather in Paris?"}]


async def chat_clients(base_url: str, count: int) -> list:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=120)
    return await asyncio.gather(
        *(
            client.chat.completions.create(
                model="LlamaForCausalLM",
                messages=MESSAGES,
                max_tokens=16,
                seed=i,
                logprobs=True,
                extra_body={"ignore_eos": True},
                extra_headers={"x-rollout-caller": f"agent-{i}"},
            )
            for i in range(count)
        )
    )


@pytest.mark.slow
def test_64_openai_clients_a_grpc_client_and_a_weight_push_share_the_engine_cleanly() -> None:
    new_weights = tiny_model("llama", seed=1)
    with (
        openai_serving(weight_sync=True) as (grpc_server, http),
        RolloutClient(grpc_server.address) as client,
    ):
        grpc_out: list = []
        grpc_thread = threading.Thread(
            target=lambda: grpc_out.extend(
                client.generate([[5, 6, 7]] * 8, SamplingParams(max_tokens=16, ignore_eos=True))
            )
        )
        push_out: list[int] = []
        push = threading.Thread(target=lambda: push_out.append(client.update_weights(new_weights)))
        grpc_thread.start()
        push.start()
        replies = asyncio.run(chat_clients(http.base_url, 64))
        grpc_thread.join(120)
        push.join(120)
        after = asyncio.run(chat_clients(http.base_url, 1))[0]
    assert push_out == [1] and len(grpc_out) == 8
    choices = [r.choices[0] for r in replies]
    assert all(len(c.model_extra["token_ids"]) == 16 == len(c.logprobs.content) for c in choices)
    assert all(
        len({v for _, v in c.model_extra["weight_versions"]}) == 1 for c in choices
    )  # no mixed versions
    assert all(len({v for _, v in s.weight_versions}) == 1 for o in grpc_out for s in o.outputs)
    assert after.choices[0].model_extra["weight_version"] == 1  # the next round is served at the new version
