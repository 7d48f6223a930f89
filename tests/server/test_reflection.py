"""A generic gRPC client that knows nothing of our stubs finds and calls the service by reflection."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from tests.server.server_builders import make_engine, serving


def test_reflection_lists_services_and_calls_get_server_info() -> None:
    with serving(make_engine(num_blocks=64)) as server, grpc.insecure_channel(server.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        pool = descriptor_pool.DescriptorPool(database)
        method = pool.FindServiceByName("rollout.v1.RolloutService").FindMethodByName("GetServerInfo")
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        call = channel.unary_unary(
            "/rollout.v1.RolloutService/GetServerInfo",
            request_serializer=request_cls.SerializeToString,
            response_deserializer=response_cls.FromString,
        )
        reply = call(request_cls(), timeout=10)
    assert {"rollout.v1.RolloutService", "grpc.health.v1.Health"} <= services
    assert reply.vocab_size == 128 and reply.num_blocks_total == 64


class V1Database(ProtoReflectionDescriptorDatabase):
    """The same reflection client, speaking `grpc.reflection.v1` (what current grpcurl tries first)."""

    def __init__(self, channel: grpc.Channel) -> None:
        super().__init__(channel)
        self._stub = SimpleNamespace(
            ServerReflectionInfo=channel.stream_stream(
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
        )


@pytest.mark.parametrize("database_cls", [ProtoReflectionDescriptorDatabase, V1Database])
def test_describe_a_method_resolves_it_like_grpcurl_over_v1_and_v1alpha(database_cls: type) -> None:
    with serving(make_engine(num_blocks=64)) as server, grpc.insecure_channel(server.address) as channel:
        database = database_cls(channel)
        services = set(database.get_services())
        pool = descriptor_pool.DescriptorPool(database)
        method = pool.FindMethodByName("rollout.v1.RolloutService.Generate")  # `grpcurl describe` asks this
        health_check = pool.FindMethodByName("grpc.health.v1.Health.Check")
        v1 = pool.FindServiceByName("grpc.reflection.v1.ServerReflection")
    assert {"grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} <= services
    assert method.input_type.full_name == "rollout.v1.GenerateRequest" and method.server_streaming
    assert health_check.output_type.full_name == "grpc.health.v1.HealthCheckResponse"
    assert "ServerReflectionInfo" in v1.methods_by_name


@pytest.mark.parametrize("token_for_discovery", [False, True])
def test_health_and_reflection_need_the_token_only_when_asked(token_for_discovery: bool) -> None:
    kwargs = {"token": "s3cret", "token_for_health_and_reflection": token_for_discovery}
    with (
        serving(make_engine(num_blocks=64), **kwargs) as server,
        grpc.insecure_channel(server.address) as channel,
    ):
        health = health_pb2_grpc.HealthStub(channel)
        calls = {
            "health": lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=10),
            "reflection": lambda: list(V1Database(channel).get_services()),
            "rollout": lambda: pb_grpc.RolloutServiceStub(channel).GetServerInfo(
                pb.GetServerInfoRequest(), timeout=10
            ),
        }
        codes = {}
        for name, call in calls.items():
            try:
                call()
                codes[name] = grpc.StatusCode.OK
            except grpc.RpcError as error:
                codes[name] = error.code()
    denied = grpc.StatusCode.UNAUTHENTICATED
    assert codes["rollout"] == denied
    expected = denied if token_for_discovery else grpc.StatusCode.OK
    assert codes["health"] == expected and codes["reflection"] == expected
