"""Chat messages over gRPC: what no template can render truly (no role, numeric content, an image part with
no image served, a lone surrogate) is INVALID_ARGUMENT naming the field, from a raw stub or refused by the
client before sending; roles stay open (templates define their own), unlike OpenAI's API."""

from __future__ import annotations

import json

import grpc
import pytest

from rollout import SamplingParams
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from tests.builders import tool_chat_tokenizer
from tests.server.server_builders import client_for, make_engine, serving

PARAMS = SamplingParams(max_tokens=1, temperature=0.0)
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def as_json(message: dict) -> pb.ChatMessage:
    """A message as its JSON text; json.dumps writes a lone surrogate as JSON's escape, `\\ud800`."""
    return pb.ChatMessage(message_json=json.dumps(message))


HI = pb.ChatMessage(role="user", content="hi")
# (the chat a raw client sends, the field the refusal names); each reached the template before
REFUSED = [
    (pb.ChatMessages(messages=[pb.ChatMessage(content="hi")]), "chat.messages[0].role"),
    (pb.ChatMessages(messages=[as_json({"content": "hi"})]), "chat.messages[0].role"),
    (pb.ChatMessages(messages=[as_json({"role": "user", "content": 5})]), "chat.messages[0].content"),
    (
        pb.ChatMessages(
            messages=[HI, as_json({"role": "user", "content": [{"type": "text", "text": "a"}, IMAGE]})]
        ),
        "chat.messages[1].content[1]",
    ),
    (  # protobuf strings cannot hold a lone surrogate; JSON text can spell one
        pb.ChatMessages(messages=[as_json({"role": "user", "content": "a\ud800"})]),
        "chat.messages[0].message_json.content",
    ),
    (pb.ChatMessages(messages=[HI], tools_json=json.dumps([{"name": "\udc00"}])), "chat.tools_json[0].name"),
]


def test_a_message_no_template_renders_truly_is_invalid_argument_naming_the_field() -> None:
    with serving(make_engine(tokenizer=tool_chat_tokenizer())) as server:
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        got = []
        for chat, _ in REFUSED:
            with pytest.raises(grpc.RpcError) as info:
                stub.GenerateBatch(pb.GenerateBatchRequest(prompts=[pb.Prompt(chat=chat)]), timeout=30)
            got.append((info.value.code(), info.value.details().split(":")[1].strip()))
        accepted = server.loop.counters["accepted"]
    assert got == [(grpc.StatusCode.INVALID_ARGUMENT, field) for _, field in REFUSED]
    assert accepted == 0


def test_the_client_refuses_them_before_sending() -> None:
    no_role = [{"content": "hi"}]
    image = [{"role": "user", "content": [IMAGE]}]
    surrogate = [{"role": "user", "content": "a\ud800"}]
    with serving(make_engine(tokenizer=tool_chat_tokenizer())) as server, client_for(server) as client:
        for conversation, field in [(no_role, "role"), (image, r"content\[0\]"), (surrogate, "content")]:
            with pytest.raises(ValueError, match=rf"^prompts\[0\]\[0\]\.{field}: "):
                client.generate([conversation], PARAMS)


def test_a_role_the_template_defines_is_served_over_grpc() -> None:
    """Llama 3.1's templates take `ipython` for tool results: gRPC callers render what they send."""
    conversation = [{"role": "user", "content": "hi"}, {"role": "ipython", "content": "42"}]
    with serving(make_engine(tokenizer=tool_chat_tokenizer())) as server, client_for(server) as client:
        (out,) = client.generate([conversation], PARAMS)
    want = tool_chat_tokenizer().apply_chat_template(
        conversation, add_generation_prompt=True, return_dict=False
    )
    assert out.prompt_token_ids == want
