"""The torch.distributed transport: a trainer (this process) and two server processes on gloo."""

import os
import signal
import subprocess
import sys
import textwrap
from contextlib import AbstractContextManager

import pytest

from rollout.client import RolloutClient
from rollout.client.weight_push import WeightSyncError
from tests.builders import tiny_model
from tests.weights.server_builders import addresses_of, greedy_tokens, reference_tokens, stdin_processes

# A server process: tiny engine (seed 0) with the WeightSyncService; prints its address, serves
# until its stdin closes.
SERVER = textwrap.dedent(
    """
    import sys
    from tests.weights.server_builders import weight_server

    with weight_server(seed=0) as server:
        print(server.address, flush=True)
        sys.stdin.read()
    """
)


def server_processes(count: int) -> AbstractContextManager[list[subprocess.Popen]]:
    return stdin_processes(*[[sys.executable, "-c", SERVER]] * count)


@pytest.mark.slow
def test_trainer_updates_two_server_processes_several_times_over_one_group() -> None:
    with server_processes(2) as procs, RolloutClient(addresses_of(procs)) as client:
        client.weight_pusher.init_group(
            timeout_s=60
        )  # ahead of the first push, as docs/weight_updates.md shows
        groups = {id(client.weight_pusher._group.group)}
        for version, seed in enumerate((1, 2, 0), start=1):
            new = tiny_model(seed=seed)
            assert client.update_weights(new, "distributed", bucket_bytes=64_000, timeout_s=60) == version
            groups.add(id(client.weight_pusher._group.group))
            for address in client.addresses:
                with RolloutClient(address) as one:
                    assert greedy_tokens(one) == reference_tokens(seed), (address, version)
        assert len(groups) == 1  # set up once, reused


@pytest.mark.slow
def test_a_dead_server_is_named_and_the_live_one_keeps_its_weights() -> None:
    with server_processes(2) as procs, RolloutClient(addresses_of(procs)) as client:
        assert client.update_weights(tiny_model(seed=1), "distributed", timeout_s=60) == 1
        dead, live = client.addresses
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait()
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(tiny_model(seed=2), "distributed")
        assert dead in info.value.failures
        with RolloutClient(live) as one:
            assert greedy_tokens(one) == reference_tokens(1)


@pytest.mark.slow
def test_one_refusal_aborts_the_broadcast_for_every_server_and_the_group_survives() -> None:
    with server_processes(2) as procs, RolloutClient(addresses_of(procs)) as client:
        assert client.update_weights(tiny_model(seed=1), "distributed", timeout_s=60) == 1
        ahead, behind = client.addresses
        with RolloutClient(ahead) as one:  # one server moves to version 5 on its own
            assert one.update_weights(tiny_model(seed=1), "grpc", version=5) == 5
        with pytest.raises(WeightSyncError) as info:  # version 3 is behind `ahead`: it refuses
            client.update_weights(tiny_model(seed=2), "distributed", version=3, timeout_s=60)
        assert list(info.value.failures) == [ahead] and "version" in info.value.failures[ahead]
        for address, version in ((ahead, 5), (behind, 1)):  # nobody entered the broadcast
            assert client.server_info(address).weight_version == version
            with RolloutClient(address) as one:
                assert greedy_tokens(one) == reference_tokens(1), address
        assert client.update_weights(tiny_model(seed=2), "distributed", version=6, timeout_s=60) == 6
        for address in client.addresses:  # the same group carries the next update to both
            assert client.server_info(address).weight_version == 6
            with RolloutClient(address) as one:
                assert greedy_tokens(one) == reference_tokens(2), address
