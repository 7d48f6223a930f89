"""Structured outputs through a real gRPC server: the offline engine's samples, compiled on the RPC
thread (never the engine loop's), with the bans too, and bad specs or a server without a tokenizer refused by
name."""

from __future__ import annotations

import re

import grpc
import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.protocol import convert
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.structured_outputs import StructuredOutputsParams
from tests.server.server_builders import client_for, make_engine, serving
from tests.structured.builders import SCHEMA, follows_schema, json_tokenizer, structured_llm

pytest.importorskip("xgrammar")

PROMPTS = ["abc", "{x"]
SPECS = [
    StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True),
    StructuredOutputsParams(regex="(yes|no)-[0-9]{2}"),
    StructuredOutputsParams(choice=("alpha", "beta", "gamma delta")),
]


# vLLM's structural_tag (xgrammar's format): what forced tool calls compile to (openai/tools/forced_calls.py)
TAG = {
    "type": "structural_tag",
    "format": {
        "type": "tag",
        "begin": "call ",
        "content": {"type": "json_schema", "json_schema": SCHEMA},
        "end": " end",
    },
}


def test_a_structural_tag_is_followed_through_the_server() -> None:
    spec = StructuredOutputsParams(structural_tag=TAG)
    params = SamplingParams(n=3, seed=4, max_tokens=80, structured_outputs=spec)
    with serving(make_engine(tokenizer=json_tokenizer())) as server, client_for(server) as client:
        served = client.generate(PROMPTS, params)
    for sample in (s for o in served for s in o.outputs):
        assert sample.finish_reason == "stop", sample.text
        assert sample.text.startswith("call ") and sample.text.endswith(" end")
        assert follows_schema(sample.text[5:-4])


def _comparable(outputs: list) -> list:
    return [[(s.token_ids, s.token_logprobs, s.text, s.finish_reason) for s in o.outputs] for o in outputs]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_the_server_returns_the_offline_engines_samples(spec: StructuredOutputsParams) -> None:
    params = SamplingParams(n=3, seed=4, max_tokens=60, logprobs=0, structured_outputs=spec)
    engine = make_engine(tokenizer=json_tokenizer())
    with serving(engine) as server, client_for(server) as client:
        served = client.generate(PROMPTS, params)
    assert _comparable(served) == _comparable(structured_llm().generate(PROMPTS, params))
    texts = [s.text for o in served for s in o.outputs]
    if spec.kind == "json":
        assert all(follows_schema(t) for t in texts)
    elif spec.kind == "regex":
        assert all(re.fullmatch(spec.regex, t) for t in texts)
    else:
        assert set(texts) <= set(spec.choice)
    assert "rollout-engine-loop" not in engine.grammars.compiler.compile_threads


def test_the_spec_survives_the_wire() -> None:
    for spec in [
        *SPECS,
        StructuredOutputsParams(json_object=True),
        StructuredOutputsParams(grammar='root ::= "a"'),
        StructuredOutputsParams(structural_tag=TAG),
    ]:
        params = SamplingParams(structured_outputs=spec)
        assert convert.params_from_proto(convert.params_to_proto(params)) == params


def _refusal(server, params: pb.SamplingParams) -> tuple[grpc.StatusCode, str]:
    request = pb.GenerateRequest(prompts=[pb.Prompt(token_ids=pb.TokenIds(ids=[5, 6]))], params=params)
    with RolloutClient(server.address, max_retries=0) as client, pytest.raises(grpc.RpcError) as info:
        list(client.stubs[server.address].Generate(request, timeout=10))
    return info.value.code(), info.value.details()


def test_a_schema_that_does_not_compile_is_invalid_argument_naming_the_field() -> None:
    bad = SamplingParams(structured_outputs=StructuredOutputsParams(json='{"type": "nonsense"}'))
    with serving(make_engine(tokenizer=json_tokenizer())) as server:
        code, details = _refusal(server, convert.params_to_proto(bad))
        with client_for(server) as client:  # and the server serves on
            assert client.generate(["abc"], SamplingParams(max_tokens=2))[0].outputs[0].token_ids
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "structured_outputs.json" in details


def test_an_empty_spec_is_invalid_argument_naming_the_field() -> None:
    with serving(make_engine(tokenizer=json_tokenizer())) as server:
        code, details = _refusal(server, pb.SamplingParams(structured_outputs=pb.StructuredOutputs()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "structured_outputs" in details


def test_a_server_without_a_tokenizer_refuses_structured_outputs() -> None:
    params = SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+"))
    with serving(make_engine()) as server:
        code, details = _refusal(server, convert.params_to_proto(params))
    assert (
        code == grpc.StatusCode.INVALID_ARGUMENT
        and "structured_outputs" in details
        and "tokenizer" in details
    )


def test_a_grammar_with_bans_gives_the_offline_samples_and_an_empty_step_comes_back_as_abort() -> None:
    """min_tokens, allowed_token_ids and bad_words (tokenized on the RPC thread) with a grammar, and in
    the same call a request whose grammar can only end while min_tokens bans EOS."""
    tokenizer = json_tokenizer()
    allowed = tuple(tokenizer.convert_tokens_to_ids(list("abcd"))) + (tokenizer.eos_token_id,)
    banned = SamplingParams(
        n=3,
        seed=4,
        max_tokens=10,
        logprobs=0,
        min_tokens=4,
        allowed_token_ids=allowed,
        bad_words=("ab",),
        structured_outputs=StructuredOutputsParams(regex="[a-e]{2,6}"),
    )
    stuck = SamplingParams(
        max_tokens=10, min_tokens=5, structured_outputs=StructuredOutputsParams(regex="ab")
    )
    with serving(make_engine(tokenizer=tokenizer)) as server, client_for(server) as client:
        served = client.generate(PROMPTS, [banned, stuck])
    offline = structured_llm().generate(PROMPTS, [banned, stuck])
    # the server may batch the two requests apart: the same tokens, logprobs within float noise
    assert [[(s.token_ids, s.text, s.finish_reason) for s in o.outputs] for o in served] == [
        [(s.token_ids, s.text, s.finish_reason) for s in o.outputs] for o in offline
    ]
    for got, want in zip(served[0].outputs, offline[0].outputs, strict=True):
        assert got.token_logprobs == pytest.approx(want.token_logprobs, abs=1e-5)
    texts = [s.text for s in served[0].outputs]
    assert all(re.fullmatch("[abcd]{4,6}", t) and "ab" not in t for t in texts), texts
    assert [(s.finish_reason, s.text) for s in served[1].outputs] == [("abort", "ab")]
