"""Every response of a server carries its boot id, fresh per server process (rollout/server/boot_id.py)."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.metadata import BOOT_ID_KEY
from rollout.sampling_params import SamplingParams
from tests.server.server_builders import client_for, serving


def _boot_id(call: grpc.Call) -> str | None:
    return dict(call.initial_metadata() or ()).get(BOOT_ID_KEY)


def test_server_info_and_every_kind_of_response_carry_the_same_boot_id() -> None:
    with serving() as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        info, info_call = stub.GetServerInfo.with_call(pb.GetServerInfoRequest())
        stream = stub.Generate(pb.GenerateRequest(prompts=[pb.Prompt(token_ids=pb.TokenIds(ids=[1, 2]))]))
        list(stream)
        bad = stub.Generate(pb.GenerateRequest(prompts=[pb.Prompt(token_ids=pb.TokenIds(ids=[]))]))
        with pytest.raises(grpc.RpcError) as refused:
            list(bad)
        _, health_call = health_pb2_grpc.HealthStub(channel).Check.with_call(health_pb2.HealthCheckRequest())
    assert len(info.boot_id) == 32 and info.boot_id == server.boot_id
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert {_boot_id(info_call), _boot_id(stream), _boot_id(refused.value), _boot_id(health_call)} == {
        info.boot_id
    }


def test_a_refused_token_is_answered_with_the_boot_id_too() -> None:
    with (
        serving(token="secret") as server,
        grpc.insecure_channel(server.address) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        pb_grpc.RolloutServiceStub(channel).GetServerInfo(pb.GetServerInfoRequest())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _boot_id(refused.value) == server.boot_id


def test_two_servers_have_different_boot_ids() -> None:
    with serving() as first, serving() as second, client_for(first) as a, client_for(second) as b:
        a.generate([[1, 2]], SamplingParams(max_tokens=2))
        assert a.server_info().boot_id != b.server_info().boot_id
