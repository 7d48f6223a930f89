"""Status codes that mean what they say: unparsable bytes, ids outside the vocabulary, oversized calls."""

import grpc
import pytest

from rollout import SamplingParams
from rollout.protocol.generated import rollout_pb2 as pb
from tests.server.server_builders import client_for, serving
from tests.weights.server_builders import weight_server

GARBAGE = b"\x0a\xff\xff\xff\xff\xff"  # field 1, length-delimited, with a length past the end
INVALID_UTF8 = (
    pb.GenerateBatchRequest(prompts=[pb.Prompt(text="x")]).SerializeToString().replace(b"x", b"\xff")
)


@pytest.mark.parametrize(
    ("method", "payload"),
    [
        ("/rollout.v1.RolloutService/GenerateBatch", GARBAGE),
        ("/rollout.v1.RolloutService/GenerateBatch", INVALID_UTF8),
        ("/rollout.v1.RolloutService/Generate", INVALID_UTF8),
    ],
)
def test_bytes_that_do_not_parse_are_invalid_argument(method: str, payload: bytes) -> None:
    with serving() as server, client_for(server) as client:
        channel = client.channels[server.address]
        call = (channel.unary_stream if method.endswith("/Generate") else channel.unary_unary)(method)
        with pytest.raises(grpc.RpcError) as info:
            response = call(payload, timeout=10)
            list(response) if method.endswith("/Generate") else response
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not parse" in info.value.details()


def test_an_update_stream_with_bytes_that_do_not_parse_is_invalid_argument() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        call = client.channels[server.address].stream_unary("/rollout.v1.WeightSyncService/UpdateWeights")
        with pytest.raises(grpc.RpcError) as info:
            call(iter([GARBAGE]), timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert server.loop.engine.weight_version == 0


def test_stop_token_ids_outside_the_vocabulary_are_refused_by_name() -> None:
    with serving() as server, client_for(server, max_retries=0) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.generate([[1, 2, 3]], SamplingParams(max_tokens=2, stop_token_ids=[5, 128]))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "stop_token_ids" in info.value.details() and "128" in info.value.details()


def test_a_call_with_more_prompts_than_the_admission_limit_says_the_call_is_too_large() -> None:
    with (
        serving(loop_kwargs={"max_pending_requests": 3}) as server,
        client_for(server, max_retries=0) as client,
    ):
        with pytest.raises(grpc.RpcError) as info:
            client.generate([[1, 2, 3]] * 4, SamplingParams(max_tokens=2))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "4 new prompts" in info.value.details() and "split" in info.value.details()
        assert len(client.generate([[1, 2, 3]] * 3, SamplingParams(max_tokens=2))) == 3


@pytest.mark.parametrize("order", [("wrong", "s3cret"), ("s3cret", "wrong"), ("s3cret", "s3cret")])
def test_more_than_one_authorization_header_is_unauthenticated(order: tuple[str, str]) -> None:
    """Whichever copy counts would be a guess (gRPC keeps both; a proxy may keep either): refused."""
    metadata = tuple(("authorization", f"Bearer {token}") for token in order)
    with serving(token="s3cret") as server, client_for(server, token="s3cret") as client:
        info_call = client.stubs[server.address].GetServerInfo
        with pytest.raises(grpc.RpcError) as info:
            info_call(pb.GetServerInfoRequest(), timeout=10, metadata=metadata)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "more than once" in info.value.details()
        assert client.server_info().vocab_size > 0  # one header, the right token: accepted


def test_a_resumed_sample_with_impossible_logprobs_is_invalid_argument() -> None:
    partial = pb.PartialSample(
        index=0,
        token_ids=[5, 6],
        logprobs=[-0.5, float("nan")],
        kept_log_mass=[0.0, 0.0],
        weight_versions=[pb.VersionSpan(first_token_index=0, version=0)],
        kv_versions=[pb.VersionSpan(first_token_index=0, version=0)],
    )
    prompt = pb.Prompt(token_ids=pb.TokenIds(ids=[3, 4, 5]), resume=partial)
    params = pb.SamplingParams(n=1, max_tokens=4, logprobs=0)
    with serving() as server, client_for(server, max_retries=0) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.stubs[server.address].GenerateBatch(
                pb.GenerateBatchRequest(prompts=[prompt], params=params), timeout=10
            )
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "prompts[0]: resume.logprobs[1]" in info.value.details()
        assert server.loop.counters["accepted"] == 0
