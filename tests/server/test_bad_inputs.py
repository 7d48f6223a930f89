"""Bad input gets the right status code and a message naming the field; the server keeps serving."""

from __future__ import annotations

import grpc
import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.server.generated import rollout_pb2 as pb
from tests.server.server_builders import make_engine, serving

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _prompt(ids: list[int]) -> pb.Prompt:
    return pb.Prompt(token_ids=pb.TokenIds(ids=ids))


CASES = {
    "empty prompt": (pb.Prompt(token_ids=pb.TokenIds()), pb.SamplingParams(), INVALID, "prompt_token_ids"),
    "no prompt set": (pb.Prompt(), pb.SamplingParams(), INVALID, "prompts[0]"),
    "empty text": (pb.Prompt(text=""), pb.SamplingParams(), INVALID, "text"),
    "token id >= vocab": (_prompt([1, 128]), pb.SamplingParams(), INVALID, "prompt_token_ids"),
    "negative token id": (_prompt([-1]), pb.SamplingParams(), INVALID, "prompt_token_ids"),
    "n = 0": (_prompt([5]), pb.SamplingParams(n=0), INVALID, "n must be"),
    "n huge": (_prompt([5]), pb.SamplingParams(n=10_000), INVALID, "max_num_seqs"),
    "max_tokens = 0": (_prompt([5]), pb.SamplingParams(max_tokens=0), INVALID, "max_tokens"),
    "max_tokens < 0": (_prompt([5]), pb.SamplingParams(max_tokens=-3), INVALID, "max_tokens"),
    "temperature < 0": (_prompt([5]), pb.SamplingParams(temperature=-0.5), INVALID, "temperature"),
    "top_p = 0": (_prompt([5]), pb.SamplingParams(top_p=0.0), INVALID, "top_p"),
    "top_p > 1": (_prompt([5]), pb.SamplingParams(top_p=1.5), INVALID, "top_p"),
    "prompt over the context": (_prompt([5] * 512), pb.SamplingParams(), INVALID, "max_model_len"),
    "text without tokenizer": (pb.Prompt(text="hello"), pb.SamplingParams(), INVALID, "tokenizer"),
    "oversized message": (
        _prompt([5] * 1_200_000),
        pb.SamplingParams(),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "larger than max",
    ),
}


@pytest.fixture(scope="module")
def server():
    with serving(make_engine(), max_message_bytes=2**20) as running:
        yield running


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gets_status_and_field_and_server_keeps_serving(server, case: str) -> None:
    prompt, params, code, field = CASES[case]
    with RolloutClient(server.address) as client:
        stub = client.stubs[server.address]
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Generate(pb.GenerateRequest(prompts=[prompt], params=params), timeout=10))
        assert info.value.code() == code
        assert field in info.value.details()
        out = client.generate([[5, 6]], SamplingParams(max_tokens=2, temperature=0.0))
    assert len(out[0].outputs[0].token_ids) == 2
    assert server.loop.stats()["num_requests_unfinished"] == 0


def test_no_prompts_is_invalid(server) -> None:
    with RolloutClient(server.address) as client, pytest.raises(grpc.RpcError) as info:
        client.stubs[server.address].GenerateBatch(pb.GenerateBatchRequest(), timeout=10)
    assert info.value.code() == INVALID and "prompts" in info.value.details()


def test_missing_or_wrong_token_is_unauthenticated_when_auth_is_on() -> None:
    with serving(token="s3cret") as server:
        for token in (None, "wrong"):
            with (
                RolloutClient(server.address, token=token, max_retries=0) as client,
                pytest.raises(grpc.RpcError) as info,
            ):
                client.generate([[5]], SamplingParams(max_tokens=1))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "token" in info.value.details()
        with RolloutClient(server.address, token="s3cret") as client:
            client.wait_until_ready(timeout=10)  # health stays open
            assert len(client.generate([[5]], SamplingParams(max_tokens=1))[0].outputs) == 1


def test_paused_server_answers_unavailable() -> None:
    with serving() as server, RolloutClient(server.address, max_retries=0) as client:
        client.pause()
        with pytest.raises(grpc.RpcError) as info:
            client.generate([[5]], SamplingParams(max_tokens=1))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "paused" in info.value.details()
        client.resume()
        assert len(client.generate([[5]], SamplingParams(max_tokens=1))) == 1
