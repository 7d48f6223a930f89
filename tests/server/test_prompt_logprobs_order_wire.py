"""Prompt logprobs in vLLM's order through a real loopback gRPC server (the prompt token's own entry first,
then the top k), and from a server that predates that order (it sent the top k first): the client reorders."""

from __future__ import annotations

import grpc

from rollout import SamplingParams
from rollout.protocol import convert
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.logprob_wire import entry_to_proto
from rollout.protocol.score_wire import prompt_logprobs_from_proto
from tests.builders import tiny_llm
from tests.engine.test_prompt_logprobs_order import (
    K,
    as_tuples,
    assert_vllm_order,
    prompt_with_greedy_tail,
    vllm_entries,
)
from tests.server.server_builders import client_for, make_engine, serving


def test_the_client_gets_vllms_order_from_a_real_server() -> None:
    llm = tiny_llm()
    prompt = prompt_with_greedy_tail(llm)
    params = SamplingParams(max_tokens=1, prompt_logprobs=K)
    with serving(make_engine()) as server, client_for(server) as client:
        got = client.generate([prompt], params)[0].prompt_logprobs
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        request = pb.GenerateBatchRequest(
            prompts=[pb.Prompt(token_ids=pb.TokenIds(ids=prompt))], params=convert.params_to_proto(params)
        )
        wire = stub.GenerateBatch(request).results[0].prompt_logprobs
    assert_vllm_order(as_tuples(got), vllm_entries(llm, prompt, K))
    assert [m.entries[0].token_id for m in wire] == prompt[1:]  # the server itself sends vLLM's order


def test_the_client_puts_the_prompt_token_first_from_a_server_that_sent_the_top_k_first() -> None:
    llm = tiny_llm()
    prompt = prompt_with_greedy_tail(llm)
    entries = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=K))[0].prompt_logprobs
    older = [dict(reversed(entry.items())) for entry in entries[1:]]  # the top k first, the prompt token last
    messages: list[pb.TopLogprobs] = [entry_to_proto(entry) for entry in older]
    back = prompt_logprobs_from_proto(messages, True, prompt)
    assert [list(entry)[0] for entry in back[1:]] == prompt[1:]
    assert [sorted(entry) for entry in back[1:]] == [sorted(entry) for entry in entries[1:]]
