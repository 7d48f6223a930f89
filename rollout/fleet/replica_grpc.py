"""A replica's side of the fleet's gRPC front: each GrpcCall goes to the replica's own gRPC server.

The replica runs an ordinary rollout server (engine_replica.py); the front hands it a call's bytes
through Ray Serve and this sends them on over loopback, so every RPC is answered by the servicer a
single server uses (auth, validation, idempotent request ids, sleep, metrics). gRPC errors come back
as data (a GrpcReply with the status), so that a Ray error at the front means only that the replica
was lost, which is what the front fails over on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from rollout.fleet.replica_calls import GrpcCall, GrpcReply

MAX_MESSAGE_BYTES = 2**31 - 1


class ReplicaGrpc:
    """Calls the replica's gRPC server at `address` (a grpc.aio channel made on first use, on the
    event loop the replica's methods run on)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel: Any = None

    def channel(self) -> Any:
        if self._channel is None:
            options = [
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ]
            self._channel = grpc.aio.insecure_channel(self.address, options=options)
        return self._channel

    async def unary(self, call: GrpcCall) -> GrpcReply:
        method = self.channel().unary_unary(call.method)  # no (de)serializers: bytes in, bytes out
        try:
            body = await method(call.request, metadata=call.metadata, timeout=call.timeout)
        except grpc.aio.AioRpcError as err:
            return GrpcReply(err.code().name, err.details() or "")
        return GrpcReply("OK", body=body)

    async def stream(self, call: GrpcCall) -> AsyncIterator[bytes | GrpcReply]:
        """Each response message's bytes, then the call's status as a GrpcReply."""
        method = self.channel().unary_stream(call.method)
        rpc = method(call.request, metadata=call.metadata, timeout=call.timeout)
        try:
            async for message in rpc:
                yield message
        except grpc.aio.AioRpcError as err:
            yield GrpcReply(err.code().name, err.details() or "")
            return
        finally:
            rpc.cancel()  # the front went away (its caller cancelled): the server aborts the requests
        yield GrpcReply("OK")
