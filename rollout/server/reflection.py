"""Server reflection the way standard tools use it: `grpc.reflection.v1` and `v1alpha`, method symbols.

grpcio-reflection serves only v1alpha, and its symbol lookup misses method names, so
`grpcurl describe rollout.v1.RolloutService.Generate` fails. v1 is the same protocol under a new
package name (identical messages and field numbers), so one servicer answers both; a method name
resolves to the file of its service.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME
V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


class ReflectionServicer(reflection.ReflectionServicer):
    """The v1alpha servicer, plus method symbols (`package.Service.Method`) for `describe`."""

    def _file_containing_symbol(self, request, fully_qualified_name):
        service, _, method = fully_qualified_name.rpartition(".")
        try:
            if method in self._pool.FindServiceByName(service).methods_by_name:
                fully_qualified_name = service
        except KeyError:
            pass  # not a method: look the name up as it is
        return super()._file_containing_symbol(request, fully_qualified_name)


def add_reflection(server: grpc.Server, service_names: Sequence[str]) -> None:
    """Serves reflection for `service_names` (plus both reflection services) under v1 and v1alpha."""
    _register_v1_descriptor(descriptor_pool.Default())
    servicer = ReflectionServicer([*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME])
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        [
            grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler})
            for name in (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
        ]
    )


def _register_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Adds `grpc.reflection.v1` (v1alpha renamed) to `pool`, so tools can describe it as well."""
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    old, new = f".{file.package}.", ".grpc.reflection.v1."
    file.name, file.package = _V1_FILE, "grpc.reflection.v1"
    for message in file.message_type:
        for field in message.field:
            if field.HasField("type_name"):
                field.type_name = field.type_name.replace(old, new)
    for method in file.service[0].method:
        method.input_type = method.input_type.replace(old, new)
        method.output_type = method.output_type.replace(old, new)
    pool.AddSerializedFile(file.SerializeToString())
