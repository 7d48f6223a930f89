"""Score, prompt logprobs and the logits processors over a real loopback gRPC server: the same
values as the offline engine, and bad input refused by name while the rest of the batch runs."""

from __future__ import annotations

import threading

import grpc
import pytest

from rollout import SamplingParams
from rollout.llm import LLM
from rollout.protocol.score_wire import prompt_logprobs_from_proto
from tests.builders import char_tokenizer, random_prompts, tiny_model
from tests.server.server_builders import client_for, make_engine, serving

PROCESSORS = SamplingParams(
    n=2,
    max_tokens=6,
    seed=3,
    logprobs=2,
    min_tokens=3,
    presence_penalty=0.5,
    frequency_penalty=-0.3,
    logit_bias={4: 3.0},
    bad_words=["ab"],
    bad_words_token_ids=[[10, 11]],
    prompt_logprobs=1,
)


def offline() -> LLM:
    """The engine server_builders.make_engine serves, driven in-process."""
    return LLM(model=tiny_model("llama", 0), tokenizer=char_tokenizer(), num_blocks=256, max_num_seqs=64)


def test_score_over_grpc_equals_the_offline_score() -> None:
    sequences = random_prompts(3, 2, 40, seed=5)
    expected = offline().score(sequences, top_logprobs=2)
    with serving(make_engine(tokenizer=char_tokenizer())) as server, client_for(server) as client:
        got = client.score(sequences, top_logprobs=2)
    for g, e in zip(got, expected, strict=True):
        assert (g.token_ids, g.logprobs, g.top_logprobs) == (e.token_ids, e.logprobs, e.top_logprobs)


def test_processors_and_prompt_logprobs_over_grpc_equal_offline_streamed_and_batched() -> None:
    prompts = random_prompts(2, 5, 20, seed=6)
    expected = offline().generate(prompts, PROCESSORS)
    with serving(make_engine(tokenizer=char_tokenizer())) as server, client_for(server) as client:
        streamed = client.generate(prompts, PROCESSORS)
        stub, pb, convert = _stub(server)
        batch = stub.GenerateBatch(
            pb.GenerateBatchRequest(
                prompts=[pb.Prompt(token_ids=pb.TokenIds(ids=p)) for p in prompts],
                params=convert.params_to_proto(PROCESSORS),
            )
        )
    for got, want in zip(streamed, expected, strict=True):
        assert got.prompt_logprobs == want.prompt_logprobs
        assert [(s.token_ids, s.token_logprobs) for s in got.outputs] == [
            (s.token_ids, s.token_logprobs) for s in want.outputs
        ]
    assert [
        prompt_logprobs_from_proto(r.prompt_logprobs, True, list(r.prompt_token_ids)) for r in batch.results
    ] == [e.prompt_logprobs for e in expected]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (SamplingParams(logit_bias={500: 1.0}), "logit_bias"),
        (SamplingParams(allowed_token_ids=[999]), "allowed_token_ids"),
        (SamplingParams(bad_words_token_ids=[[3, 700]]), "bad_words_token_ids"),
    ],
)
def test_bad_processor_input_is_invalid_argument_naming_it_and_others_run_on(
    params: SamplingParams, field: str
) -> None:
    with serving(make_engine()) as server, client_for(server) as client:
        done = []
        good = threading.Thread(
            target=lambda: done.append(client.generate([[5, 6]], SamplingParams(max_tokens=30)))
        )
        good.start()
        with pytest.raises(grpc.RpcError) as err:
            client.generate([[5, 6]], params)
        good.join()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.value.details()
        assert len(done) == 1 and done[0][0].outputs[0].finish_reason in ("stop", "length")


def test_bad_words_on_a_server_without_tokenizer_is_invalid_argument() -> None:
    with serving(make_engine()) as server, client_for(server) as client, pytest.raises(grpc.RpcError) as err:
        client.generate([[5, 6]], SamplingParams(bad_words=["ab"]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "bad_words" in err.value.details()


def test_score_refuses_an_id_outside_the_vocabulary_naming_it() -> None:
    with serving(make_engine()) as server, client_for(server) as client, pytest.raises(grpc.RpcError) as err:
        client.score([[5, 6], [7, 128]])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "prompts[1]" in err.value.details()


def _stub(server):
    from rollout.protocol import convert
    from rollout.protocol.generated import rollout_pb2 as pb
    from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc

    return pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address)), pb, convert
