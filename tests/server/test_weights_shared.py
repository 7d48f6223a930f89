"""Weight updates through shared memory (the `shared` transport), against a real server on loopback.

The trainer (this process) shares its parameters' storage; the server maps it and copies in place.
"""

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import torch

from rollout import SamplingParams
from rollout.client.weight_push import WeightSyncError
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.shared_wire import this_host, views_to_proto
from rollout.protocol.weights_wire import commit_options
from rollout.weights.shared import share_tensors
from tests.builders import tiny_model
from tests.server.server_builders import client_for, slow_steps, wait_for
from tests.weights.server_builders import PROMPTS, greedy_tokens, reference_tokens, weight_server

TIMEOUT_S = 30.0


def test_shared_update_serves_the_new_weights_under_a_new_version() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        assert client.update_weights(tiny_model(seed=1), transport="shared") == 1
        assert greedy_tokens(client) == reference_tokens(1)


def test_the_trainer_parameters_stay_in_shared_memory_and_a_later_push_reads_their_new_values() -> None:
    trainer = tiny_model(seed=1)
    with weight_server(seed=0) as server, client_for(server) as client:
        client.update_weights(trainer, transport="shared")
        pointers = [p.data_ptr() for p in trainer.parameters()]
        assert all(p.is_shared() for p in trainer.parameters())
        with torch.no_grad():  # an optimizer step, in place, as a trainer does it
            for param, new in zip(trainer.parameters(), tiny_model(seed=2).parameters(), strict=True):
                param.copy_(new)
        assert client.update_weights(trainer, transport="shared") == 2
        assert [p.data_ptr() for p in trainer.parameters()] == pointers  # shared once, not moved again
        assert greedy_tokens(client) == reference_tokens(2)


def test_a_retried_update_id_returns_its_version_and_is_not_applied_again() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        assert client.update_weights(tiny_model(seed=1), transport="shared", update_id="u-1") == 1
        assert client.update_weights(tiny_model(seed=2), transport="shared", update_id="u-1") == 1
        assert server.loop.engine.weight_version == 1
        assert greedy_tokens(client) == reference_tokens(1)


def test_a_bad_manifest_is_refused_by_name_and_the_old_weights_keep_serving() -> None:
    bad = {**tiny_model(seed=1).state_dict(), "model.norm.weight": torch.zeros(3)}
    with weight_server(seed=0) as server, client_for(server) as client:
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(bad, transport="shared")
        failure = info.value.failures[server.address]
        assert "INVALID_ARGUMENT" in failure and "model.norm.weight" in failure
        assert server.loop.engine.weight_version == 0
        assert greedy_tokens(client) == reference_tokens(0)


def test_an_update_from_another_machine_is_refused_and_nothing_changes() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        request = shared_request(tiny_model(seed=1))
        request.host.boot_id = "00000000-another-machine"
        request.host.hostname = "trainer-7"
        with pytest.raises(grpc.RpcError) as info:
            stub(client, server).UpdateWeightsFromShared(request, timeout=TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "this machine" in info.value.details() and "trainer-7" in info.value.details()
        assert server.loop.engine.weight_version == 0
        assert greedy_tokens(client) == reference_tokens(0)


def test_a_view_reaching_past_its_shared_storage_is_refused_before_mapping() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        request = shared_request(tiny_model(seed=1))
        request.tensors[0].storage_offset = request.tensors[0].cpu.storage_bytes  # past the end
        with pytest.raises(grpc.RpcError) as info:
            stub(client, server).UpdateWeightsFromShared(request, timeout=TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert request.tensors[0].spec.name in info.value.details()
        assert server.loop.engine.weight_version == 0


def test_a_segment_that_no_longer_exists_is_refused_and_nothing_changes() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        request = shared_request(tiny_model(seed=1))  # the model, and so its segments, are freed here
        with pytest.raises(grpc.RpcError) as info:
            stub(client, server).UpdateWeightsFromShared(request, timeout=TIMEOUT_S)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "segment" in info.value.details()
        assert server.loop.engine.weight_version == 0
        assert greedy_tokens(client) == reference_tokens(0)


def test_abort_in_flight_commits_mid_generation_and_returns_the_partial_samples() -> None:
    params = SamplingParams(temperature=0, max_tokens=150, ignore_eos=True, logprobs=0)
    with weight_server(seed=0, max_model_len=512) as server, client_for(server) as client:
        slow_steps(server.loop.engine)
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(client.generate, PROMPTS[:1], params, timeout=TIMEOUT_S)
            wait_for(lambda: server.loop.stats()["num_generated_tokens"] > 0, TIMEOUT_S, "a token")
            pushed = client.update_weights(
                tiny_model(seed=1), "shared", in_flight="abort", timeout_s=TIMEOUT_S
            )
            (result,) = running.result(timeout=TIMEOUT_S)
        assert pushed == 1
        assert result.outputs[0].finish_reason == "abort" and len(result.outputs[0].token_ids) < 150


def shared_request(model: torch.nn.Module) -> weights_pb2.UpdateWeightsFromSharedRequest:
    views = share_tensors(list(model.state_dict().items()))
    options = commit_options(None, False, "wait", "")
    return weights_pb2.UpdateWeightsFromSharedRequest(
        tensors=views_to_proto(views), options=options, host=this_host()
    )


def stub(client, server) -> weights_pb2_grpc.WeightSyncServiceStub:
    return weights_pb2_grpc.WeightSyncServiceStub(client.channels[server.address])
