"""A stand-in for the fleet's gRPC front (rollout/fleet/grpc_front.py, built elsewhere): one grpc.aio
address whose GetServerInfo answers weight_group_ranks and whose weight-group RPCs are
rollout/fleet/group_fanout.py's functions, for a real RolloutClient to push through."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc

from rollout.fleet.group_fanout import close_group, init_group, update_from_group
from rollout.protocol.generated import rollout_pb2, rollout_pb2_grpc, weights_pb2_grpc


class StandInFront(rollout_pb2_grpc.RolloutServiceServicer, weights_pb2_grpc.WeightSyncServiceServicer):
    """What group_fanout.py assumes of the front: handle, replicas(), ledger, boot_id."""

    def __init__(self, fleet: Any) -> None:
        self.handle, self.replicas, self.ledger = fleet.handle, fleet.replicas, fleet._ledger
        self.boot_id = "stand-in-front"

    async def GetServerInfo(self, request, context):
        live = await asyncio.to_thread(self.replicas)
        return rollout_pb2.GetServerInfoResponse(weight_group_ranks=len(live), boot_id=self.boot_id)

    async def InitWeightGroup(self, request, context):
        return await init_group(self, request, context)

    async def UpdateWeightsFromGroup(self, request, context):
        return await update_from_group(self, request, context)

    async def CloseWeightGroup(self, request, context):
        return await close_group(self, request, context)


@contextmanager
def stand_in_front(fleet: Any) -> Iterator[str]:
    """The front's address, served from an event loop in a thread of this process."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        front = StandInFront(fleet)
        rollout_pb2_grpc.add_RolloutServiceServicer_to_server(front, server)
        weights_pb2_grpc.add_WeightSyncServiceServicer_to_server(front, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = asyncio.run_coroutine_threadsafe(start(), loop).result()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
