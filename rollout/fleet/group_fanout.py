"""torch.distributed pushes through the fleet's gRPC front: not here yet (a placeholder).

The front routes InitWeightGroup, UpdateWeightsFromGroup and CloseWeightGroup here; until the fleet
fans a group out to its replicas, each answers UNIMPLEMENTED (push over gRPC or disk instead).
"""

from __future__ import annotations

from typing import Any

import grpc

MISSING = "torch.distributed pushes through the fleet front are not implemented yet: push over gRPC or disk"


async def init_group(front: Any, request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNIMPLEMENTED, MISSING)


async def update_from_group(front: Any, request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNIMPLEMENTED, MISSING)


async def close_group(front: Any, request: Any, context: grpc.ServicerContext) -> Any:
    context.abort(grpc.StatusCode.UNIMPLEMENTED, MISSING)
