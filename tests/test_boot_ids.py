"""A client notices a server restarted on the same address from any call's response (rollout/client/boot_ids.py)."""

from __future__ import annotations

import grpc
import pytest

from rollout.client import RolloutClient
from rollout.sampling_params import SamplingParams
from rollout.server.weights_servicer import register_weight_sync
from tests.server.server_builders import serving


def test_every_call_kind_records_the_answering_servers_boot_id() -> None:
    with serving(extra_servicers=[register_weight_sync]) as server, RolloutClient(server.address) as client:
        client.wait_until_ready(10)  # health check
        assert client.boot_ids.latest() == {server.address: server.boot_id}
        client.generate([[1, 2]], SamplingParams(max_tokens=2))  # a stream
        assert client.update_weights(server.loop.engine.model) == 1  # a client stream, the pusher's stub
        assert client.boot_ids.restarts() == {server.address: 0}


def test_a_restart_on_the_same_port_is_counted_whatever_call_sees_it_first() -> None:
    with serving() as first:
        client = RolloutClient(first.address)
        port = first.port
        client.server_info()
    try:
        with serving(port=port) as second:
            client.generate([[1, 2]], SamplingParams(max_tokens=2))
            assert client.boot_ids.latest() == {second.address: second.boot_id}
            assert client.boot_ids.restarts() == {second.address: 1}
        with pytest.raises(grpc.RpcError):
            client.server_info()  # nothing answers: no boot id, nothing counted
        assert client.boot_ids.restarts() == {second.address: 1}
    finally:
        client.close()
