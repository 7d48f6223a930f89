"""Stop strings and text through a real gRPC server: the same samples as the offline engine, found
off the engine loop's thread, cut short in the engine, and bad values refused naming the field."""

from __future__ import annotations

import threading

import grpc
import pytest

from rollout import LLM, EngineConfig, SamplingParams
from rollout.client import RolloutClient
from rollout.detokenize.sample_text import SampleText
from rollout.outputs import RequestOutput
from rollout.protocol import convert
from rollout.protocol.generated import rollout_pb2 as pb
from tests.builders import random_prompts, tiny_model
from tests.detokenize.tokenizer_builders import piece_tokenizer
from tests.server.server_builders import client_for, make_engine, serving, slow_steps

PROMPTS = random_prompts(3, 4, 12, seed=3)
PARAMS = SamplingParams(n=3, max_tokens=24, seed=7, logprobs=0, ignore_eos=True, stop=["ce", "<think>"])


def offline(params: SamplingParams) -> list:
    llm = LLM(model=tiny_model("llama", 0), tokenizer=piece_tokenizer(), config=EngineConfig(num_blocks=256))
    return llm.generate(PROMPTS, params)


def comparable(outputs: list) -> list:
    return [
        [
            (s.token_ids, s.text, s.finish_reason, s.stop_reason, round(s.cumulative_logprob, 4))
            for s in o.outputs
        ]
        for o in outputs
    ]


@pytest.mark.parametrize("include", [False, True])
def test_the_server_returns_the_offline_engines_samples(include: bool) -> None:
    params = SamplingParams(**{**PARAMS.__dict__, "include_stop_str_in_output": include})
    with serving(make_engine(tokenizer=piece_tokenizer())) as server, client_for(server) as client:
        served = client.generate(PROMPTS, params)  # the streaming Generate
        batch = client.stubs[server.address].GenerateBatch(
            pb.GenerateBatchRequest(
                prompts=[_ids(p) for p in PROMPTS], params=convert.params_to_proto(params)
            )
        )
    expected = comparable(offline(params))
    assert comparable(served) == expected
    from_batch = [
        RequestOutput(r.request_id, [], [convert.sample_from_proto(s, True, False) for s in r.samples])
        for r in batch.results
    ]
    assert comparable(from_batch) == expected
    assert any(s.stop_reason for o in served for s in o.outputs)


def _ids(prompt: list[int]) -> pb.Prompt:
    return pb.Prompt(token_ids=pb.TokenIds(ids=prompt))


def test_the_engine_loop_thread_never_decodes(monkeypatch) -> None:
    threads: set[str] = set()
    push = SampleText.push

    def recording_push(self, *args, **kwargs):
        threads.add(threading.current_thread().name)
        return push(self, *args, **kwargs)

    monkeypatch.setattr(SampleText, "push", recording_push)
    with serving(make_engine(tokenizer=piece_tokenizer())) as server, client_for(server) as client:
        client.generate(PROMPTS, PARAMS)
    assert threads and "rollout-engine-loop" not in threads


def test_a_stopped_sample_stops_generating_and_frees_its_blocks() -> None:
    """The stop watch finishes the sample in the engine, not only in the answer: with a stop string
    met within a few tokens, far fewer than max_tokens are generated."""
    engine = make_engine(tokenizer=piece_tokenizer())
    slow_steps(engine, delay=0.005)  # the watch thread keeps up with steps this slow on any box
    params = SamplingParams(n=4, max_tokens=400, seed=7, ignore_eos=True, stop=["a"])
    with serving(engine) as server, client_for(server) as client:
        free = client.server_info().num_blocks_free
        outputs = client.generate(PROMPTS, params)
        returned = sum(len(s.token_ids) for o in outputs for s in o.outputs)
        assert all(s.stop_reason == "a" for o in outputs for s in o.outputs)
        info = client.server_info()
    generated = engine.stats()["num_generated_tokens"]
    assert generated < len(PROMPTS) * params.n * params.max_tokens / 4, (generated, returned)
    assert info.num_blocks_free == free


def _refusal(server, params: pb.SamplingParams) -> tuple[grpc.StatusCode, str]:
    request = pb.GenerateRequest(prompts=[_ids([5, 6])], params=params)
    with RolloutClient(server.address, max_retries=0) as client, pytest.raises(grpc.RpcError) as info:
        list(client.stubs[server.address].Generate(request, timeout=10))
    return info.value.code(), info.value.details()


def test_an_empty_stop_string_is_invalid_argument_naming_stop() -> None:
    with serving(make_engine(tokenizer=piece_tokenizer())) as server:
        code, details = _refusal(server, pb.SamplingParams(stop=["a", ""]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "stop" in details and "empty" in details


def test_a_stop_string_on_a_server_without_a_tokenizer_is_invalid_argument_naming_stop() -> None:
    with serving(make_engine()) as server:
        code, details = _refusal(server, pb.SamplingParams(stop=["a"]))
        with client_for(server) as client:  # and the server serves on
            assert client.generate([[5, 6]], SamplingParams(max_tokens=2))[0].outputs[0].token_ids
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "stop" in details and "tokenizer" in details
