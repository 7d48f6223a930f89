"""A silent or short update stream, or a group that never forms, cannot hold the server's update lock."""

import time

import grpc
import pytest

from rollout.client.weight_push import stream_requests
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.weights_wire import commit_options, manifest_to_proto
from rollout.weights.group import host_store
from rollout.weights.manifest import Manifest, unique_named_tensors
from tests.builders import tiny_model
from tests.server.server_builders import client_for
from tests.server.test_weights_grpc import start_stalled_stream
from tests.weights.server_builders import greedy_tokens, reference_tokens, weight_server


def test_a_silent_uploader_is_dropped_after_the_idle_timeout_and_the_next_update_commits() -> None:
    with weight_server(seed=0, idle_timeout_s=0.5) as server, client_for(server) as client:
        silent = start_stalled_stream(client.channels[server.address], num_chunks=1)
        try:
            assert client.update_weights(tiny_model(seed=1), transport="grpc", timeout_s=15) == 1
            error = silent.exception(timeout=15)
        finally:
            silent.cancel()
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED and "idle" in error.details()
        assert greedy_tokens(client) == reference_tokens(1)


def test_a_stream_that_ends_before_the_last_byte_is_invalid_and_writes_nothing() -> None:
    named = unique_named_tensors(tiny_model(seed=1).state_dict())
    header = weights_pb2.WeightUpdateHeader(
        manifest=manifest_to_proto(Manifest.of(named)), options=commit_options(None, False)
    )
    short = list(stream_requests(header, named, 1024))[:3]  # the header and two chunks, then the end
    with weight_server(seed=0) as server, client_for(server) as client:
        stub = weights_pb2_grpc.WeightSyncServiceStub(client.channels[server.address])
        with pytest.raises(grpc.RpcError) as info:
            stub.UpdateWeights(iter(short), timeout=15)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "stream ended after 2048 of" in info.value.details()
        assert server.loop.engine.weight_version == 0
        assert greedy_tokens(client) == reference_tokens(0)


def test_joining_a_group_whose_trainer_never_joins_ends_within_the_idle_timeout() -> None:
    store = host_store("127.0.0.1", 0, world_size=2, timeout_s=30)
    request = weights_pb2.InitWeightGroupRequest(
        master_addr="127.0.0.1", master_port=store.port, world_size=2, rank=1, timeout_s=600
    )
    with weight_server(seed=0, idle_timeout_s=1.0) as server, client_for(server) as client:
        stub = weights_pb2_grpc.WeightSyncServiceStub(client.channels[server.address])
        start = time.monotonic()
        call = stub.InitWeightGroup.future(request)
        error = call.exception(timeout=120)  # the request's own 600 s would still be waiting
        assert error is not None and error.code() != grpc.StatusCode.OK
        assert time.monotonic() - start < 120  # 1 s of idle timeout, far from 600
