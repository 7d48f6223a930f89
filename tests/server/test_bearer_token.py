"""The bearer token answers every kind of RPC before any request message is read, and an empty token is
refused where the server is built (it used to mean no auth at all)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.generated import weights_pb2_grpc
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop
from rollout.server.weights_servicer import SERVICE_NAME, weight_sync_hook
from tests.server.server_builders import make_engine, serving

WEIGHT_SYNC = {"extra_servicers": [weight_sync_hook(30.0)], "extra_service_names": [SERVICE_NAME]}


def auth(token: str | None) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


def code_of(call: Callable[[], object]) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_an_empty_update_weights_stream_without_the_token_is_unauthenticated() -> None:
    """A client stream with no message waited for one before the denial: UNIMPLEMENTED."""
    with serving(token="s3cret", **WEIGHT_SYNC) as server:
        channel = grpc.insecure_channel(server.address)
        update = weights_pb2_grpc.WeightSyncServiceStub(channel).UpdateWeights
        generate = pb_grpc.RolloutServiceStub(channel).Generate
        refused = [
            code_of(lambda: update(iter([]), timeout=30)),
            code_of(lambda: update(iter([]), timeout=30, metadata=auth("wrong"))),
            code_of(lambda: list(generate(pb.GenerateRequest(), timeout=30))),  # a response stream
        ]
        # the right token reaches the servicer, which refuses a stream with no header itself
        let_in = code_of(lambda: update(iter([]), timeout=30, metadata=auth("s3cret")))
    assert refused == [grpc.StatusCode.UNAUTHENTICATED] * 3
    assert let_in == grpc.StatusCode.INVALID_ARGUMENT


def test_an_empty_token_is_refused_when_the_server_is_built() -> None:
    with pytest.raises(ValueError, match="^token: empty"):
        RolloutServer(EngineLoop(make_engine()), token="")
