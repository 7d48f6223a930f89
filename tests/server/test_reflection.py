"""A generic gRPC client that knows nothing of our stubs finds and calls the service by reflection."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

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
