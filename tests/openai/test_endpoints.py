"""The OpenAI endpoints driven by the official `openai` client (sync and async, streaming and not)."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
import torch

from rollout.client import RolloutClient
from rollout.openai.requests import sampling
from tests.builders import TOOLS, tiny_model
from tests.openai.openai_builders import chat_engine, hermes_tokenizer, openai_serving

MESSAGES = [{"role": "user", "content": "weather in Paris?"}]


def teacher_forced(prompt: list[int], completion: list[int]) -> list[float]:
    """log p(token | prefix) from the test model's own eager forward (same seed = same weights)."""
    model = tiny_model("llama", 0)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    logp = logits[len(prompt) - 1 : -1].log_softmax(-1)
    return logp.gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def test_models_lists_the_served_model_with_its_weight_version() -> None:
    with openai_serving() as (_, http):
        models = openai.OpenAI(base_url=http.base_url, api_key="none").models.list().data
    assert [m.id for m in models] == ["LlamaForCausalLM"]
    assert models[0].model_extra["weight_version"] == 0


def test_chat_returns_the_template_prompt_ids_sampled_ids_and_teacher_forced_logprobs() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = client.chat.completions.create(
            model="LlamaForCausalLM",
            messages=MESSAGES,
            tools=TOOLS,
            max_tokens=12,
            n=2,
            seed=3,
            logprobs=True,
            extra_body={"ignore_eos": True},
        )
    want = hermes_tokenizer().apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, return_dict=False
    )
    prompt = reply.model_extra["prompt_token_ids"]
    assert prompt == want and len(reply.choices) == 2
    for choice in reply.choices:
        ids = choice.model_extra["token_ids"]
        served = [entry.logprob for entry in choice.logprobs.content]
        assert len(served) == len(ids) == 12 and choice.model_extra["weight_version"] == 0
        assert max(abs(a - b) for a, b in zip(served, teacher_forced(prompt, ids), strict=True)) <= 1e-4
        assert choice.message.content == hermes_tokenizer().decode(ids, skip_special_tokens=True)
    assert reply.usage.prompt_tokens == len(prompt) and reply.usage.completion_tokens == 24


def test_completions_take_token_id_prompts_and_order_choices_prompt_major() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = client.completions.create(
            model="LlamaForCausalLM", prompt=[[5, 6, 7], [8, 9]], max_tokens=4, n=2, logprobs=2, seed=0
        )
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert reply.model_extra["prompt_token_ids"] == [[5, 6, 7], [8, 9]]
    for choice in reply.choices:
        assert len(choice.logprobs.token_logprobs) == len(choice.model_extra["token_ids"]) == 4
        assert all(len(top) == 2 for top in choice.logprobs.top_logprobs)


def test_return_token_ids_false_leaves_out_the_prompt_and_sampled_ids() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = client.completions.create(
            model="LlamaForCausalLM", prompt=[5, 6, 7], max_tokens=4, extra_body={"return_token_ids": False}
        )
    assert "prompt_token_ids" not in reply.model_extra
    assert "token_ids" not in reply.choices[0].model_extra and reply.choices[0].text is not None


def test_a_streamed_chat_carries_the_same_tokens_as_the_unstreamed_one() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        args = dict(model="LlamaForCausalLM", messages=MESSAGES, max_tokens=8, seed=5, n=2)
        whole = client.chat.completions.create(**args)
        chunks = list(
            client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
        )
    streamed = {c.index: c for chunk in chunks for c in chunk.choices if c.finish_reason}
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].model_extra["prompt_token_ids"] == whole.model_extra["prompt_token_ids"]
    for choice in whole.choices:
        assert streamed[choice.index].model_extra["token_ids"] == choice.model_extra["token_ids"]
        deltas = [c.delta.content or "" for chunk in chunks for c in chunk.choices if c.index == choice.index]
        assert "".join(deltas) == choice.message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_the_async_client_streams_and_waits_concurrently() -> None:
    async def run(base_url: str) -> tuple[list, list]:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="none")
        args = dict(model="LlamaForCausalLM", messages=MESSAGES, max_tokens=6, seed=1)
        whole = await asyncio.gather(*(client.chat.completions.create(**args) for _ in range(4)))
        stream = await client.chat.completions.create(**args, stream=True)
        return whole, [chunk async for chunk in stream]

    with openai_serving() as (_, http):
        whole, chunks = asyncio.run(run(http.base_url))
    ids = {tuple(r.choices[0].model_extra["token_ids"]) for r in whole}
    last = [c for chunk in chunks for c in chunk.choices if c.finish_reason][0]
    assert ids == {tuple(last.model_extra["token_ids"])}  # same seed, same tokens, whatever ran beside


def test_stop_given_as_token_ids_stops_there() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        args = dict(model="LlamaForCausalLM", prompt=[5, 6, 7], max_tokens=12, seed=2)
        free = client.completions.create(**args).choices[0].model_extra["token_ids"]
        stopped = client.completions.create(**args, stop=[], extra_body={"stop": [free[3]]}).choices[0]
    assert stopped.model_extra["token_ids"] == free[: free.index(free[3]) + 1]
    assert stopped.finish_reason == "stop"


@pytest.mark.parametrize(
    ("field", "value"),
    [("stop", ["</s>"]), ("presence_penalty", 0.5), ("frequency_penalty", 0.5), ("logit_bias", {"5": 1.0})],
)
def test_a_field_sampling_params_lacks_is_refused_naming_it(monkeypatch, field: str, value: object) -> None:
    """The front end passes these through once SamplingParams has them; a server without one refuses it."""
    monkeypatch.setattr(sampling, "PARAM_FIELDS", sampling.PARAM_FIELDS - {field})
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        with pytest.raises(openai.BadRequestError, match=f"{field}: not supported by this server yet"):
            client.chat.completions.create(model="LlamaForCausalLM", messages=MESSAGES, **{field: value})


def test_logit_bias_and_min_tokens_reach_the_sampler() -> None:
    """OpenAI's logit_bias (string keys) and vLLM's min_tokens arrive with their meaning."""
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        args = dict(model="LlamaForCausalLM", prompt=[5, 6, 7], seed=3)
        forced = client.completions.create(**args, max_tokens=6, logit_bias={"9": 100.0}).choices[0]
        free = client.completions.create(**args, max_tokens=12).choices[0].model_extra["token_ids"]
        early = free[1]  # a stop token the free sample hits at its second token
        held = client.completions.create(
            **args, max_tokens=6, extra_body={"stop": [early], "min_tokens": 5}
        ).choices[0]
    assert forced.model_extra["token_ids"] == [9] * 6
    assert len(held.model_extra["token_ids"]) >= 5 and early not in held.model_extra["token_ids"][:5]


def test_neutral_values_of_unsupported_fields_are_accepted() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = client.chat.completions.create(
            model="LlamaForCausalLM",
            messages=MESSAGES,
            max_tokens=2,
            presence_penalty=0.0,
            frequency_penalty=0,
        )
    assert len(reply.choices[0].model_extra["token_ids"]) == 2


def test_vllm_extra_body_fields_reach_the_sampler() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        reply = client.chat.completions.create(
            model="LlamaForCausalLM",
            messages=MESSAGES,
            max_tokens=6,
            logprobs=True,
            top_logprobs=1,
            extra_body={"top_k": 1, "min_p": 0.0, "repetition_penalty": 1.0},
        )
    # top_k=1 leaves one token: each sampled token is the top one and its processed logprob is 0
    assert all(abs(e.logprob) < 1e-6 for e in reply.choices[0].logprobs.content)


def test_the_bearer_token_guards_every_route_but_health() -> None:
    with openai_serving(token="secret") as (_, http):
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=http.base_url, api_key="wrong").models.list()
        assert openai.OpenAI(base_url=http.base_url, api_key="secret").models.list().data
        root = http.base_url.removesuffix("/v1")
        assert httpx.get(f"{root}/health").status_code == 200
        assert httpx.get(f"{root}/metrics").status_code == 401


def test_metrics_serve_the_grpc_servers_prometheus_text() -> None:
    with openai_serving() as (grpc_server, http):
        openai.OpenAI(base_url=http.base_url, api_key="none").completions.create(
            model="LlamaForCausalLM", prompt=[5, 6], max_tokens=3
        )
        text = httpx.get(http.base_url.removesuffix("/v1") + "/metrics").text
        with RolloutClient(grpc_server.address) as client:
            assert client.server_info().weight_version == 0
    assert "rollout_generated_tokens_total 3" in text


def test_an_unknown_model_name_is_404() -> None:
    with (
        openai_serving(chat_engine()) as (_, http),
        pytest.raises(openai.NotFoundError, match="is not served here"),
    ):
        openai.OpenAI(base_url=http.base_url, api_key="none").chat.completions.create(
            model="gpt-4o", messages=MESSAGES
        )


def test_a_stop_string_cuts_the_text_and_ends_the_tokens_at_the_completing_token() -> None:
    with openai_serving() as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        args = dict(model="LlamaForCausalLM", prompt=[5, 6, 7], max_tokens=12, seed=4)
        free = client.completions.create(**args).choices[0]
        stop = free.text[3:5]
        cut = client.completions.create(**args, stop=[stop]).choices[0]
    assert stop and cut.finish_reason == "stop"
    assert cut.text == free.text[: free.text.index(stop)]
    ids, free_ids = cut.model_extra["token_ids"], free.model_extra["token_ids"]
    assert ids == free_ids[: len(ids)] and len(ids) < len(free_ids)
