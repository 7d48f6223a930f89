"""torch.distributed pushes through a real local Ray Serve fleet: 2 replicas of a tiny model, gloo on CPU.

The test process is rank 0 (it hosts the group's store); each replica joins as ranks 1..2. Oracle: an
offline engine holding the pushed weights. The test that kills a replica runs last.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import torch

ray = pytest.importorskip("ray", reason='the fleet tests need the ray extra: pip install "rollout[ray]"')
peft = pytest.importorskip("peft")

from peft import LoraConfig, get_peft_model  # noqa: E402

from rollout import SamplingParams  # noqa: E402
from rollout.client import RolloutClient  # noqa: E402
from rollout.client.weight_push import WeightSyncError  # noqa: E402
from rollout.fleet import ServeFleet  # noqa: E402
from rollout.fleet.fleet_update import FleetUpdateError  # noqa: E402
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc  # noqa: E402
from tests.fleet.group_front_builders import stand_in_front  # noqa: E402
from tests.fleet.serve_fleet_builders import (  # noqa: E402
    offline_greedy,
    perturbed,
    replica_greedy,
    save_chat_model,
    two_replica_fleet,
)
from tests.weights.lora_builders import set_adapter  # noqa: E402

GREEDY = SamplingParams(max_tokens=6, temperature=0)
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_chat_model(tmp_path_factory.mktemp("group-fleet") / "model")


@pytest.fixture(scope="module")
def fleet(model_dir: Path) -> Iterator[ServeFleet]:
    with two_replica_fleet(model_dir) as f:
        yield f


def _fleet_greedy(fleet: ServeFleet) -> list[list[list[int]]]:
    return replica_greedy(fleet, PROMPTS, GREEDY)


def _offline_greedy(model: torch.nn.Module, model_dir: Path) -> list[list[list[int]]]:
    return [offline_greedy(model, model_dir, PROMPTS, GREEDY)] * 2


def _versions(fleet: ServeFleet) -> list[int]:
    return [d["weight_version"] for d in fleet.describe()]


def test_a_distributed_push_reaches_every_replica_and_the_group_carries_the_next(
    fleet: ServeFleet, model_dir: Path
) -> None:
    start = _versions(fleet)
    assert len(set(start)) == 1
    fleet.init_weight_group(backend="gloo", timeout_s=120)
    group = fleet._group.group
    first = perturbed(1)
    version = fleet.update_weights(first, transport="distributed", bucket_bytes=4096)
    assert version == start[0] + 1 and _versions(fleet) == [version, version]
    assert _fleet_greedy(fleet) == _offline_greedy(first, model_dir)
    second = perturbed(2)
    assert fleet.update_weights(second, transport="distributed") == version + 1
    assert fleet._group.group is group  # the same group: no second set-up
    assert _versions(fleet) == [version + 1, version + 1]
    assert _fleet_greedy(fleet) == _offline_greedy(second, model_dir)
    with fleet.client() as client:  # per-token versions: one version per sample, the new one
        outs = client.generate(PROMPTS, GREEDY)
    assert {tuple(s.weight_versions) for o in outs for s in o.outputs} == {((0, version + 1),)}


def test_a_wrong_shape_changes_no_replica_and_the_group_stays(fleet: ServeFleet) -> None:
    before, versions = _fleet_greedy(fleet), _versions(fleet)
    bad = dict(perturbed(3).state_dict())
    bad["model.norm.weight"] = torch.ones(3)  # every replica refuses it in the handshake
    group = fleet._group.group
    with pytest.raises(FleetUpdateError, match="model.norm.weight") as refused:
        fleet.update_weights(bad, transport="distributed")
    assert "staging" in str(refused.value) and refused.value.versions == dict.fromkeys(
        fleet.replicas(), versions[0]
    )
    assert _versions(fleet) == versions and _fleet_greedy(fleet) == before
    assert fleet._group.group is group


def test_a_client_gives_the_fronts_one_address_a_rank_per_replica_and_a_refusal_changes_none(
    fleet: ServeFleet, model_dir: Path
) -> None:
    """A RolloutClient pushes to one address (a stand-in front over group_fanout.py): it gives that
    address a rank per replica, every replica answers the handshake, and the fleet commits all or none."""
    fleet.close_weight_group()  # one rank 0 at a time: the client's group replaces this process's
    with stand_in_front(fleet) as front, RolloutClient([front]) as client:
        assert client.server_info(front).weight_group_ranks == 2
        new = perturbed(12)
        version = client.update_weights(new, "distributed", timeout_s=120)
        assert client.weight_pusher._group.ranks == {front: range(1, 3)}
        assert _versions(fleet) == [version, version]
        want = _offline_greedy(new, model_dir)
        assert _fleet_greedy(fleet) == want
        bad = dict(perturbed(13).state_dict())
        bad["model.norm.weight"] = torch.ones(3)
        with pytest.raises(WeightSyncError) as refused:
            client.update_weights(bad, "distributed", timeout_s=120)
        why = refused.value.failures[front]
        assert "model.norm.weight" in why and re.search(r"replica \w+: WeightUpdateError", why)
        assert _versions(fleet) == [version, version] and _fleet_greedy(fleet) == want
        with grpc.insecure_channel(front) as channel:
            weights_pb2_grpc.WeightSyncServiceStub(channel).CloseWeightGroup(
                weights_pb2.CloseWeightGroupRequest()
            )
        client.weight_pusher.close_group()


def test_an_adapter_one_replica_refuses_for_its_base_changes_neither_and_names_it(
    fleet: ServeFleet, model_dir: Path
) -> None:
    """Replica 0 keeps the fleet's base under an adapter, replica 1 gets a new base (both pushed past
    the fleet, over gRPC): a distributed adapter push passes replica 0's check, replica 1 refuses it in
    the handshake, neither commits; then an adapter over the group merges on both bases alike."""
    base = perturbed(4)
    fleet.update_weights(base, transport="distributed")
    policy = set_adapter(get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")), 5)
    version = _versions(fleet)[0] + 1
    first, second = fleet.grpc_addresses
    with RolloutClient([first], token=fleet.token) as client:
        held = weights_pb2.WeightBase(boot_id=client.server_info().boot_id, version=version - 1)
        client.weight_pusher.bases.record(first, weights_pb2.UpdateWeightsResponse(base=held))
        client.update_weights(policy, version=version)
    with RolloutClient([second], token=fleet.token) as client:
        client.update_weights(perturbed(6), version=version)
    before = _fleet_greedy(fleet)
    with pytest.raises(FleetUpdateError, match="base") as refused:
        fleet.update_weights(set_adapter(policy, 7), transport="distributed")
    named = re.findall(r"replica (\w+): ", str(refused.value))
    assert (
        len(set(named)) == 1
        and "BaseMismatchError" in str(refused.value)
        and "called" not in str(refused.value)
    )
    assert _versions(fleet) == [version, version] and _fleet_greedy(fleet) == before
    fleet.update_weights(
        perturbed(4), transport="distributed"
    )  # one base again (get_peft_model wrapped `base`)
    pushed = fleet.update_weights(set_adapter(policy, 8), transport="distributed")  # the adapter alone
    assert _versions(fleet) == [pushed, pushed]
    assert _fleet_greedy(fleet) == _offline_greedy(copy.deepcopy(policy).merge_and_unload(), model_dir)


def test_a_replacement_replica_comes_up_on_the_group_pushed_weights_and_joins_the_next_push(
    fleet: ServeFleet, model_dir: Path
) -> None:
    """Runs last: it kills a replica. The ledger holds what the last pushes broadcast (the base, then an
    adapter merged on it), so the replacement replays them; the next push sets up a new group."""
    want = _fleet_greedy(fleet)
    version = _versions(fleet)[0]
    assert want[0] == want[1]
    ledger = ray.get(fleet._ledger.latest.remote())  # the base pushed over the group, then the adapter
    assert [v for v, _ in ledger] == [version - 1, version] and all(p.ref is not None for _, p in ledger)
    victim = fleet.replicas()[0]
    fleet.kill_replica(victim)
    described = fleet.wait_for_replicas()
    assert victim not in {d["replica"] for d in described}
    assert [d["weight_version"] for d in described] == [version, version]
    assert _fleet_greedy(fleet) == want
    after = perturbed(9)
    assert fleet.update_weights(after, transport="distributed") == version + 1
    assert _fleet_greedy(fleet) == _offline_greedy(after, model_dir)
