"""An adapter push names its base, and a server holding another refuses it and changes nothing.

Real gRPC servers on loopback; a restart is a new server on the same port (a new boot id, its own
loaded weights), as a restarted `rollout serve` is to a client. The trainer's base (seed 1) is not
what the servers load (seed 0), so an adapter merged into the wrong base serves other logprobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
import torch

from rollout.client import RolloutClient
from rollout.client.weight_push import WeightSyncError, stream_requests
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.weights_wire import commit_options, manifest_to_proto
from rollout.server.app import RolloutServer
from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync
from rollout.weights.lora_export import peft_update
from rollout.weights.manifest import Manifest
from rollout.weights.weight_base import WeightBase
from tests.builders import tiny_model
from tests.server.server_builders import make_engine, serving
from tests.weights.lora_builders import (
    assert_same_outputs,
    merged_reference,
    outputs,
    peft_policy,
    set_adapter,
)

HOOKS = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])


@contextmanager
def weight_server_on(port: int, seed: int = 0) -> Iterator[RolloutServer]:
    with serving(make_engine(seed), port=port, **HOOKS) as server:
        yield server


def snapshot(server: RolloutServer) -> tuple[int, int, list[str], dict[str, torch.Tensor]]:
    engine = server.loop.engine
    state = {name: t.clone() for name, t in engine.model.state_dict().items()}
    return engine.weight_version, engine.adapters.base_version, engine.adapters.adapted, state


def assert_unchanged(server: RolloutServer, before: tuple) -> None:
    version, base_version, adapted, state = snapshot(server)
    assert (version, base_version, adapted) == before[:3]
    assert all(torch.equal(state[name], t) for name, t in before[3].items())


def transport_options(transport: str, tmp_path: Path) -> dict[str, object]:
    return {"path": tmp_path / "ckpt"} if transport == "disk" else {}


@pytest.mark.parametrize("transport", ["grpc", "disk", "shared"])
def test_an_adapter_push_to_a_restarted_server_is_failed_precondition_naming_both_bases_and_changes_nothing(
    transport: str, tmp_path: Path
) -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    options = transport_options(transport, tmp_path)
    with weight_server_on(0) as first:
        client = RolloutClient(first.address)
        assert client.update_weights(policy, transport, lora="full", **options) == 1
        assert client.weight_pusher.bases.pinned() == {first.address: WeightBase(first.boot_id, 1)}
    with client, weight_server_on(first.port) as second:  # restarted: its own loaded weights, version 0
        before = snapshot(second)
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(set_adapter(policy, 3), transport, **options)
        why = info.value.failures[second.address]
        print(why)
        assert why.startswith("FAILED_PRECONDITION")
        assert f"base version 1 of server process {first.boot_id}" in why  # the base it named
        assert f"base version 0 of server process {second.boot_id}" in why  # the base held
        assert_unchanged(second, before)


def test_after_a_restart_the_base_pushed_again_takes_adapter_pushes_that_serve_the_merged_policy() -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    with weight_server_on(0) as first:
        client = RolloutClient(first.address)
        client.update_weights(policy, lora="full")
    with client, weight_server_on(first.port) as second:
        with pytest.raises(WeightSyncError, match="FAILED_PRECONDITION"):
            client.update_weights(set_adapter(policy, 3))
        assert client.update_weights(policy, lora="full") == 1  # the right base, on this process
        assert client.update_weights(set_adapter(policy, 4)) == 2
        assert second.loop.engine.adapters.base_version == 1
        assert_same_outputs(outputs(client), merged_reference(policy))


def test_an_adapter_push_after_another_writers_full_push_is_refused_naming_both_versions() -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    with (
        weight_server_on(0) as server,
        RolloutClient(server.address) as trainer,
        RolloutClient(server.address) as other,
    ):
        trainer.update_weights(policy, lora="full")  # base version 1
        assert other.update_weights(tiny_model(seed=2)) == 2  # another base: version 2
        before = snapshot(server)
        with pytest.raises(WeightSyncError) as info:
            trainer.update_weights(set_adapter(policy, 3))
        why = info.value.failures[server.address]
        assert why.startswith("FAILED_PRECONDITION")
        assert f"base version 1 of server process {server.boot_id}" in why
        assert f"base version 2 of server process {server.boot_id}" in why
        assert_unchanged(server, before)


def test_adapter_pushes_from_a_client_that_never_pushed_a_base_name_the_weights_the_server_loaded() -> None:
    policy = peft_policy(base_seed=0, adapter_seed=2)  # trained on what the server loads
    with weight_server_on(0) as server, RolloutClient(server.address) as client:
        assert client.update_weights(policy) == 1
        assert client.update_weights(set_adapter(policy, 3)) == 2
        assert client.weight_pusher.bases.pinned() == {server.address: WeightBase(server.boot_id, 0)}
        assert_same_outputs(outputs(client), merged_reference(policy))


def test_before_any_base_push_an_adapter_names_the_loaded_weights_of_the_process_first_reached() -> None:
    """The client met the first process; the one that answers the push may have loaded anything."""
    policy = peft_policy(base_seed=0, adapter_seed=2)
    with weight_server_on(0) as first:
        client = RolloutClient(first.address)
        outputs(client)  # any call: the client has met this process
    with client, weight_server_on(first.port) as second:
        before = snapshot(second)
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(policy)
        why = info.value.failures[second.address]
        assert why.startswith("FAILED_PRECONDITION")
        assert f"base version 0 of server process {first.boot_id}" in why
        assert f"base version 0 of server process {second.boot_id}" in why
        assert_unchanged(second, before)


def test_an_adapter_update_that_names_no_base_is_invalid_argument_naming_base() -> None:
    named, targets = peft_update(peft_policy(adapter_seed=1))
    with weight_server_on(0) as server, grpc.insecure_channel(server.address) as channel:
        before = snapshot(server)
        options = commit_options(None, False, lora=targets)  # no base
        header = weights_pb2.WeightUpdateHeader(
            manifest=manifest_to_proto(Manifest.of(named)), options=options
        )
        stub = weights_pb2_grpc.WeightSyncServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.UpdateWeights(stream_requests(header, named, 1 << 20))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "base: " in info.value.details() and "must name that base" in info.value.details()
        assert_unchanged(server, before)
