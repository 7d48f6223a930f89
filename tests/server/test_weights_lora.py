"""Adapter-only updates over every transport against real servers on loopback: what a PEFT model's
adapter push serves equals a push of its merged weights, with retries and refusals as for any update."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.client import RolloutClient
from rollout.client.weight_push import WeightSyncError
from rollout.weights.lora_export import peft_update
from tests.server.server_builders import client_for
from tests.server.test_weights_distributed import addresses_of, server_processes
from tests.weights.lora_builders import (
    assert_same_outputs,
    merged_reference,
    outputs,
    peft_policy,
    set_adapter,
)
from tests.weights.server_builders import weight_server

Q_PROJ = "model.layers.0.self_attn.q_proj"


@pytest.mark.parametrize("transport", ["grpc", "disk"])
def test_an_adapter_push_serves_what_a_merged_push_serves(transport: str, tmp_path: Path) -> None:
    policy = peft_policy(adapter_seed=1)
    options = {"path": tmp_path} if transport == "disk" else {}
    with weight_server(seed=0) as server, client_for(server) as client:
        assert client.update_weights(policy, transport, **options) == 1
        assert client.update_weights(set_adapter(policy, 2), transport, **options) == 2
        assert_same_outputs(outputs(client), merged_reference(policy))


def test_a_full_push_then_adapter_pushes_over_grpc() -> None:
    policy = peft_policy(base_seed=1, adapter_seed=2)
    with weight_server(seed=0) as server, client_for(server) as client:
        client.update_weights(policy, lora="full")
        client.update_weights(set_adapter(policy, 3))
        assert_same_outputs(outputs(client), merged_reference(policy))


def test_a_bad_adapter_shape_is_invalid_argument_naming_the_module_and_nothing_changes() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        client.update_weights(peft_policy(adapter_seed=1))
        before = outputs(client)
        named, targets = peft_update(peft_policy(adapter_seed=2))
        named = [(n, t[:-1] if n == f"{Q_PROJ}.lora_B.weight" else t) for n, t in named]
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(named, lora=targets)
        why = info.value.failures[server.address]
        assert why.startswith("INVALID_ARGUMENT") and Q_PROJ in why
        assert server.loop.engine.weight_version == 1
        assert_same_outputs(outputs(client), before, tolerance=0.0)


def test_an_adapter_push_retried_with_its_version_or_its_id_applies_once() -> None:
    policy = peft_policy(adapter_seed=1)
    with weight_server(seed=0) as server, client_for(server) as client:
        assert client.update_weights(policy, version=5, update_id="a-1") == 5
        assert client.update_weights(policy, version=5) == 5  # same adapter, same version: a retry
        assert client.update_weights(set_adapter(policy, 2), update_id="a-1") == 5  # known id
        with pytest.raises(WeightSyncError, match="INVALID_ARGUMENT"):
            client.update_weights(policy, version=5)  # another adapter at the current version
        assert server.loop.engine.weight_version == 5
        assert_same_outputs(outputs(client), merged_reference(set_adapter(policy, 1)))


def test_an_expert_adapter_push_over_grpc_serves_what_a_merged_push_serves_and_a_retry_applies_once() -> None:
    """LoRA on stacked MoE experts (parameter targets: the flag travels in CommitOptions.lora_targets)."""
    policy = peft_policy(arch="qwen3_moe", adapter_seed=1)
    with weight_server(seed=0, arch="qwen3_moe") as server, client_for(server) as client:
        assert client.update_weights(policy, version=3) == 3
        assert client.update_weights(policy, version=3) == 3  # same adapter, same version: a retry
        assert client.update_weights(set_adapter(policy, 2), version=4) == 4
        assert_same_outputs(outputs(client), merged_reference(policy, arch="qwen3_moe"))


def test_a_bad_expert_adapter_shape_is_invalid_argument_naming_the_parameter() -> None:
    bad = "model.layers.1.mlp.experts.gate_up_proj"
    with weight_server(seed=0, arch="qwen3_moe") as server, client_for(server) as client:
        named, targets = peft_update(peft_policy(arch="qwen3_moe", adapter_seed=1))
        named = [(n, t[:-1] if n == f"{bad}.lora_B.weight" else t) for n, t in named]
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(named, lora=targets)
        why = info.value.failures[server.address]
        assert why.startswith("INVALID_ARGUMENT") and f"{bad}: lora_A" in why
        assert server.loop.engine.weight_version == 0


@pytest.mark.slow
def test_an_adapter_push_over_the_distributed_transport_serves_the_merged_weights() -> None:
    policy = peft_policy(adapter_seed=1)
    with server_processes(1) as procs, RolloutClient(addresses_of(procs)) as client:
        assert client.update_weights(policy, "distributed", timeout_s=60) == 1
        assert client.update_weights(set_adapter(policy, 2), "distributed", timeout_s=60) == 2
        assert_same_outputs(outputs(client), merged_reference(policy))
