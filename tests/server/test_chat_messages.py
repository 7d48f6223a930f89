"""Chat prompts through a real server: every message shape reaches the chat template intact."""

from __future__ import annotations

import datetime

import grpc
import pytest

from rollout import SamplingParams
from rollout.protocol.chat_messages import conversation_from_proto, conversation_to_proto
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from tests.builders import CONVERSATION, TOOLS, tool_chat_tokenizer
from tests.server.server_builders import client_for, make_engine, serving

PARAMS = SamplingParams(max_tokens=2, temperature=0.0)


def _template_ids(messages: list[dict], tools: list | None = None) -> list[int]:
    tokenizer = tool_chat_tokenizer()
    return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_dict=False)


def test_every_message_shape_reaches_the_template_as_apply_chat_template_renders_it() -> None:
    with serving(make_engine(tokenizer=tool_chat_tokenizer())) as server, client_for(server) as client:
        (out,) = client.generate([CONVERSATION], PARAMS, tools=TOOLS)
    assert out.prompt_token_ids == _template_ids(CONVERSATION, TOOLS)


def test_a_plain_chat_still_travels_as_role_and_content_for_older_servers() -> None:
    chat = conversation_to_proto([{"role": "user", "content": "hi"}], None, "prompts[0]")
    assert [(m.role, m.content, m.message_json) for m in chat.messages] == [("user", "hi", "")]
    assert not chat.HasField("tools_json")


def test_a_message_round_trips_through_the_proto_unchanged() -> None:
    messages, tools = conversation_from_proto(conversation_to_proto(CONVERSATION, TOOLS, "prompts[0]"))
    assert (messages, tools) == (CONVERSATION, TOOLS)


def test_a_value_that_is_not_json_is_refused_naming_its_field() -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": {"when": datetime.date(2024, 1, 1)}}}
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}]
    field = r"prompts\[0\]\[1\]\.tool_calls\[0\]\.function\.arguments\.when"
    with serving() as server, client_for(server) as client, pytest.raises(ValueError, match=field):
        client.generate([conversation], PARAMS)


def test_message_json_that_does_not_decode_is_invalid_argument_naming_the_field() -> None:
    chat = pb.ChatMessages(messages=[pb.ChatMessage(message_json='{"role": "user", "content": ')])
    with serving(make_engine(tokenizer=tool_chat_tokenizer())) as server:
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        with pytest.raises(grpc.RpcError) as info:
            stub.GenerateBatch(pb.GenerateBatchRequest(prompts=[pb.Prompt(chat=chat)]), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "prompts[0]: chat.messages[0].message_json: invalid JSON" in info.value.details()


def test_tools_json_that_is_not_an_array_is_invalid_argument_naming_the_field() -> None:
    chat = pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="hi")], tools_json='{"a": 1}')
    with serving(make_engine(tokenizer=tool_chat_tokenizer())) as server:
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        with pytest.raises(grpc.RpcError) as info:
            stub.GenerateBatch(pb.GenerateBatchRequest(prompts=[pb.Prompt(chat=chat)]), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "prompts[0]: chat.tools_json" in info.value.details()


def test_tools_without_a_chat_prompt_are_refused_rather_than_ignored() -> None:
    with serving() as server, client_for(server) as client, pytest.raises(ValueError, match="^tools: given"):
        client.generate([[5, 6, 7]], PARAMS, tools=TOOLS)


def test_a_text_prompt_that_starts_with_bos_gets_one_bos_on_the_server() -> None:
    text = tool_chat_tokenizer().apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    with serving(make_engine(tokenizer=tool_chat_tokenizer())) as server, client_for(server) as client:
        (out,) = client.generate([text], PARAMS)
    assert out.prompt_token_ids == _template_ids(CONVERSATION)
