"""A client's torch.distributed push to an address that takes several ranks (a fleet's front).

A real server (one rank) and a fake front (tests/weights/fake_fleet_front.py, two ranks) in their
own processes: the client gives ranks 1 and 2..3 in address order, every rank answers the ready/go
handshake, and one rank of the front refusing calls the update off for every server.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch

from rollout.client import RolloutClient
from rollout.client.weight_push import WeightSyncError
from rollout.weights.manifest import unique_named_tensors
from tests.builders import tiny_model
from tests.weights.fake_fleet_front import digest
from tests.weights.server_builders import addresses_of, greedy_tokens, reference_tokens, stdin_processes

SERVER = textwrap.dedent(
    """
    import sys
    from tests.weights.server_builders import weight_server

    with weight_server(seed=0) as server:
        print(server.address, flush=True)
        sys.stdin.read()
    """
)


def _front_digests(client: RolloutClient, front: str) -> list[str]:
    return json.loads(client.server_info(front).model)


def _expected_digest(model: torch.nn.Module) -> str:
    held = {n: t.detach().clone() for n, t in tiny_model(seed=0).state_dict().items()}
    held.update({n: t.detach() for n, t in unique_named_tensors(model.state_dict())})
    return digest(held)


@pytest.mark.slow
def test_a_multi_rank_address_gets_a_rank_per_member_and_one_refusing_rank_calls_the_update_off() -> None:
    commands = [sys.executable, "-c", SERVER], [sys.executable, "-m", "tests.weights.fake_fleet_front"]
    with stdin_processes(*commands) as procs, RolloutClient(addresses_of(procs)) as client:
        server, front = client.addresses
        assert client.server_info(front).weight_group_ranks == 2
        new = tiny_model(seed=1)
        assert client.update_weights(new, "distributed", bucket_bytes=64_000, timeout_s=60) == 1
        assert client.weight_pusher._group.ranks == {server: range(1, 2), front: range(2, 4)}
        assert _front_digests(client, front) == [_expected_digest(new)] * 2
        with RolloutClient(server) as one:
            assert greedy_tokens(one) == reference_tokens(1)
        with pytest.raises(WeightSyncError) as info:  # the front's last rank refuses: nobody receives
            client.update_weights(tiny_model(seed=2), "distributed", version=99, timeout_s=60)
        assert list(info.value.failures) == [front] and "version 99" in info.value.failures[front]
        assert client.server_info(server).weight_version == 1
        assert _front_digests(client, front) == [_expected_digest(new)] * 2
        group = client.weight_pusher._group.group
        assert client.update_weights(tiny_model(seed=2), "distributed", version=3, timeout_s=60) == 3
        assert client.weight_pusher._group.group is group  # the refusal left the group standing
        assert _front_digests(client, front) == [_expected_digest(tiny_model(seed=2))] * 2


def test_a_server_refuses_more_than_one_rank_naming_num_ranks() -> None:
    from rollout.protocol.generated import weights_pb2
    from rollout.protocol.weights_wire import group_spec_from_proto

    request = weights_pb2.InitWeightGroupRequest(
        master_addr="127.0.0.1", master_port=1234, world_size=4, rank=1, num_ranks=2
    )
    with pytest.raises(ValueError, match="num_ranks"):
        group_spec_from_proto(request, 60.0)
    request.num_ranks = 1
    assert group_spec_from_proto(request, 60.0).rank == 1
