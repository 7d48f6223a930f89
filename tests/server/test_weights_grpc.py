"""Weight updates over the gRPC stream, against a real server on loopback."""

import threading

import grpc
import pytest
import torch

from rollout.client.weight_push import WeightSyncError, stream_requests
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.weights_wire import commit_options, manifest_to_proto
from rollout.weights.manifest import Manifest, unique_named_tensors
from tests.builders import tiny_model
from tests.server.server_builders import client_for
from tests.weights.server_builders import GREEDY, PROMPTS, greedy_tokens, reference_tokens, weight_server


def test_grpc_update_serves_the_new_weights_under_a_new_version() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        before = greedy_tokens(client)
        assert client.update_weights(tiny_model(seed=1), transport="grpc", chunk_bytes=4096) == 1
        outs = client.generate(PROMPTS, GREEDY)
        assert [o.outputs[0].token_ids for o in outs] == reference_tokens(1)
        assert [o.outputs[0].token_ids for o in outs] != before
        assert {o.outputs[0].weight_version for o in outs} == {1}


def test_same_prompt_after_an_update_reuses_no_prefix_block() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        greedy_tokens(client)
        greedy_tokens(client)
        hits = server.loop.engine.stats()["num_prefix_hit_tokens"]
        assert hits > 0  # without an update the prefix cache is used, so the check below means something
        assert client.update_weights(tiny_model(seed=1), transport="grpc", version=5) == 5
        assert greedy_tokens(client) == reference_tokens(1)
        assert server.loop.engine.stats()["num_prefix_hit_tokens"] == hits


BAD_TENSORS = {
    "wrong shape": ("model.layers.0.mlp.up_proj.weight", torch.zeros(3, 3)),
    "wrong dtype": ("model.norm.weight", torch.zeros(64, dtype=torch.bfloat16)),
    "unknown name": ("model.layers.7.mlp.up_proj.weight", torch.zeros(128, 64)),
}


@pytest.mark.parametrize("case", BAD_TENSORS)
def test_bad_manifest_is_refused_by_name_and_the_old_weights_keep_serving(case: str) -> None:
    name, tensor = BAD_TENSORS[case]
    with weight_server(seed=0) as server, client_for(server) as client:
        with pytest.raises(WeightSyncError) as info:
            client.update_weights({**tiny_model(seed=1).state_dict(), name: tensor}, transport="grpc")
        failure = info.value.failures[server.address]
        assert "INVALID_ARGUMENT" in failure and name in failure
        assert greedy_tokens(client) == reference_tokens(0)
        assert server.loop.engine.weight_version == 0


def test_a_stream_cancelled_midway_leaves_the_old_version_serving() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        call = start_stalled_stream(client.channels[server.address], num_chunks=3)
        call.cancel()
        assert greedy_tokens(client) == reference_tokens(0)
        assert server.loop.engine.weight_version == 0
        assert client.update_weights(tiny_model(seed=1), transport="grpc") == 1  # nothing was left locked


def start_stalled_stream(channel: grpc.Channel, num_chunks: int) -> grpc.Future:
    """Sends the header and `num_chunks` chunks of a full update, then stalls until cancelled."""
    named = unique_named_tensors(tiny_model(seed=1).state_dict())
    header = weights_pb2.WeightUpdateHeader(
        manifest=manifest_to_proto(Manifest.of(named)), options=commit_options(None, False)
    )
    sent, stall = threading.Event(), threading.Event()

    def requests():
        for count, message in enumerate(stream_requests(header, named, 1024)):
            if count == num_chunks + 1:
                sent.set()
                stall.wait()
                return
            yield message

    call = weights_pb2_grpc.WeightSyncServiceStub(channel).UpdateWeights.future(requests())
    assert sent.wait(30)
    return call


def test_a_bad_manifest_is_refused_before_any_chunk_is_sent() -> None:
    named = unique_named_tensors({**tiny_model(seed=1).state_dict(), "model.norm.weight": torch.zeros(3)})
    header = weights_pb2.WeightUpdateHeader(
        manifest=manifest_to_proto(Manifest.of(named)), options=commit_options(None, False)
    )
    release, chunks_sent = threading.Event(), []

    def requests():
        messages = stream_requests(header, named, 1024)
        yield next(messages)  # the header alone; the chunks wait until the server has answered
        release.wait(30)
        for message in messages:
            chunks_sent.append(message)
            yield message

    with weight_server(seed=0) as server:
        stub = weights_pb2_grpc.WeightSyncServiceStub(grpc.insecure_channel(server.address))
        call = stub.UpdateWeights.future(requests())
        try:
            error = call.exception(timeout=20)  # a server that waited for the bytes would time out here
        finally:
            release.set()
        assert chunks_sent == []
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "model.norm.weight" in error.details()
        assert server.loop.engine.weight_version == 0


def test_a_server_that_self_checks_updates_rolls_a_bad_one_back() -> None:
    """`rollout serve --self-check-updates`: a NaN update fails the check; the call says so, the
    old weights and version keep serving."""
    bad = tiny_model(seed=1).state_dict()
    bad["model.layers.0.mlp.down_proj.weight"][0, 0] = float("nan")
    with weight_server(seed=0, self_check_updates=True) as server, client_for(server) as client:
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(bad, transport="grpc")
        assert "rolled back" in info.value.failures[server.address]
        assert server.loop.engine.weight_version == 0
        assert greedy_tokens(client) == reference_tokens(0)
        assert client.update_weights(tiny_model(seed=1), transport="grpc") == 1
        assert greedy_tokens(client) == reference_tokens(1)
