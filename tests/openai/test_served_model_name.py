"""`--served-model-name`: the API answers to every given name, reports the first, and gRPC keeps its own."""

from __future__ import annotations

import openai
import pytest

from rollout.client import RolloutClient
from rollout.openai.requests.served_names import ServedNames
from tests.openai.openai_builders import openai_serving

NAMES = ["qwen-policy", "policy"]
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_models_lists_every_served_name_the_first_first() -> None:
    with openai_serving(served_model_names=NAMES) as (_, http):
        models = openai.OpenAI(base_url=http.base_url, api_key="none").models.list().data
    assert [m.id for m in models] == NAMES


def test_any_served_name_is_accepted_and_replies_report_the_first() -> None:
    with openai_serving(served_model_names=NAMES) as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none")
        chat = client.chat.completions.create(model="policy", **CHAT)
        completion = client.completions.create(model="qwen-policy", prompt=[5, 6], max_tokens=2)
    assert chat.model == completion.model == "qwen-policy"


def test_the_engine_name_is_not_served_once_names_are_given() -> None:
    with (
        openai_serving(served_model_names=NAMES) as (_, http),
        pytest.raises(openai.NotFoundError, match="this server serves 'qwen-policy', 'policy'"),
    ):
        openai.OpenAI(base_url=http.base_url, api_key="none").chat.completions.create(
            model="LlamaForCausalLM", **CHAT
        )


def test_grpc_server_info_keeps_the_engine_name() -> None:
    with (
        openai_serving(served_model_names=NAMES) as (grpc_server, _),
        RolloutClient(grpc_server.address) as client,
    ):
        assert client.server_info().model == "LlamaForCausalLM"


@pytest.mark.parametrize("names", [[], [""], ["  "], "policy"])
def test_a_bad_name_list_is_refused_naming_the_field(names: object) -> None:
    with pytest.raises(ValueError, match="served_model_name"):
        ServedNames.of(names, "LlamaForCausalLM")
