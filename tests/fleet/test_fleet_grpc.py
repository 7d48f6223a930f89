"""The fleet's one gRPC address: a RolloutClient on it works as on one server, over a real Ray Serve fleet.

Two replicas of a tiny chat model, one fleet for the module. Oracles: an offline engine on the same
(or the pushed) weights, and one replica's own server for seeded sampling. The kill test runs last.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import torch

ray = pytest.importorskip("ray", reason='the fleet tests need the ray extra: pip install "rollout[ray]"')

from rollout import SamplingParams  # noqa: E402
from rollout.client import RolloutClient  # noqa: E402
from rollout.client.weight_sync_error import WeightSyncError  # noqa: E402
from rollout.fleet import ServeFleet  # noqa: E402
from rollout.protocol.generated import rollout_pb2 as pb  # noqa: E402
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc  # noqa: E402
from tests.fleet.serve_fleet_builders import (  # noqa: E402
    BLOCK,
    finished_per_replica,
    offline_greedy,
    perturbed,
    replica_greedy,
    save_chat_model,
    two_replica_fleet,
)
from tests.weights.lora_builders import set_adapter  # noqa: E402

peft = pytest.importorskip("peft")
from peft import LoraConfig, get_peft_model  # noqa: E402

GREEDY = SamplingParams(max_tokens=6, temperature=0)
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], "a text prompt"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_chat_model(tmp_path_factory.mktemp("fleet_grpc") / "model")


@pytest.fixture(scope="module")
def fleet(model_dir: Path) -> Iterator[ServeFleet]:
    with two_replica_fleet(model_dir, grpc_port=0) as f:
        yield f


@pytest.fixture
def client(fleet: ServeFleet) -> Iterator[RolloutClient]:
    with RolloutClient(fleet.grpc_address, max_retries=0) as c:  # failover is the front's, not the client's
        c.wait_until_ready(timeout=300)
        yield c


@pytest.fixture
def wakes_after(fleet: ServeFleet) -> Iterator[None]:
    """A sleep test that fails leaves no replica asleep for the tests after it."""
    yield
    fleet.wake_up()


def _offline(model: torch.nn.Module | str, model_dir: Path) -> list[list[int]]:
    return offline_greedy(model, model_dir, PROMPTS, GREEDY)


def _per_replica(fleet: ServeFleet) -> list[list[list[int]]]:
    return replica_greedy(fleet, PROMPTS, GREEDY)


def _versions(fleet: ServeFleet) -> list[int]:
    return [d["weight_version"] for d in fleet.describe()]


def test_greedy_generate_on_the_one_address_equals_an_offline_engine(
    fleet: ServeFleet, client: RolloutClient, model_dir: Path
) -> None:
    outs = client.generate(PROMPTS, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == _offline(str(model_dir), model_dir)
    chat = client.generate([[{"role": "user", "content": "hello"}]], GREEDY)[0]
    assert len(chat.outputs[0].token_ids) == 6 and chat.prompt_token_ids
    info = client.server_info()
    assert info.boot_id == client.server_info().boot_id  # the fleet's id, whichever replica answered
    assert info.boot_id not in {RolloutClient([a]).server_info().boot_id for a in fleet.grpc_addresses}
    assert "rollout_fleet_replicas 2" in client.metrics()
    client.reset_prefix_cache()
    assert client.abort("no-such-request") is False


def test_n_samples_with_logprobs_are_the_seeded_samples_one_replica_draws(
    fleet: ServeFleet, client: RolloutClient
) -> None:
    """Oracles: the same seeded call on one replica's own server; the teacher-forced score of a sample
    (temperature 1, no filter: its logprobs are the model's log-softmax)."""
    params = SamplingParams(n=3, max_tokens=8, temperature=1.0, seed=7, logprobs=2)
    outs = client.generate(PROMPTS[:2], params)
    with RolloutClient([fleet.grpc_addresses[0]]) as one:
        want = one.generate(PROMPTS[:2], params)
    for got, expected in zip(outs, want, strict=True):
        assert [s.token_ids for s in got.outputs] == [s.token_ids for s in expected.outputs]
        assert len({tuple(s.token_ids) for s in got.outputs}) == 3
        for sample, oracle in zip(got.outputs, expected.outputs, strict=True):
            assert sample.cumulative_logprob == pytest.approx(oracle.cumulative_logprob, abs=1e-4)
    sample = outs[0].outputs[0]
    scored = client.score([outs[0].prompt_token_ids + sample.token_ids])[0]
    assert sum(scored.logprobs[-8:]) == pytest.approx(sample.cumulative_logprob, abs=1e-3)


def test_the_second_turn_of_an_episode_lands_on_the_replica_that_served_the_first(
    fleet: ServeFleet, client: RolloutClient
) -> None:
    for episode in range(4):
        system = f"you are agent {'abcd'[episode]} " + "solve the task step by step " * 3
        turn = [{"role": "system", "content": system}, {"role": "user", "content": "first step"}]
        before = finished_per_replica(fleet)
        first = client.generate([turn], GREEDY)[0]
        turn += [{"role": "assistant", "content": first.outputs[0].text}, {"role": "user", "content": "next"}]
        second = client.generate([turn], GREEDY)[0]
        after = finished_per_replica(fleet)
        assert sorted(after[r] - before[r] for r in after) == [0, 2]
        assert second.num_cached_tokens >= len(first.prompt_token_ids) // BLOCK * BLOCK > 0


def test_a_session_id_in_the_metadata_pins_unrelated_prompts_to_one_replica(fleet: ServeFleet) -> None:
    before = finished_per_replica(fleet)
    with grpc.insecure_channel(fleet.grpc_address) as channel:
        stub = pb_grpc.RolloutServiceStub(channel)
        for i in range(4):
            prompt = pb.Prompt(text=f"unrelated question {'wxyz'[i]} " * (i + 1))
            request = pb.GenerateBatchRequest(prompts=[prompt], params=pb.SamplingParams(max_tokens=2))
            stub.GenerateBatch(request, metadata=[("x-session-id", "episode-7")], timeout=300)
    after = finished_per_replica(fleet)
    assert sorted(after[r] - before[r] for r in after) == [0, 4]


def test_a_grpc_push_puts_both_replicas_on_the_next_version_and_a_bad_one_changes_neither(
    fleet: ServeFleet, client: RolloutClient, model_dir: Path
) -> None:
    start = _versions(fleet)
    new = perturbed(1)
    version = client.update_weights(new)
    assert version == start[0] + 1 and _versions(fleet) == [version, version]
    want = _offline(new, model_dir)
    assert _per_replica(fleet) == [want, want]
    bad = dict(perturbed(2).state_dict())
    bad["model.norm.weight"] = torch.ones(3)  # the wrong shape: every replica refuses at staging
    with pytest.raises(WeightSyncError, match="model.norm.weight"):
        client.update_weights(bad)
    assert _versions(fleet) == [version, version] and _per_replica(fleet) == [want, want]


def test_an_adapter_and_a_disk_push_through_the_one_address_land_on_both_replicas(
    fleet: ServeFleet, client: RolloutClient, model_dir: Path, tmp_path: Path
) -> None:
    base = perturbed(5)
    client.update_weights(base)  # the base the adapter merges into; the client pins (fleet id, version)
    policy = set_adapter(get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")), 6)
    version = client.update_weights(policy)  # the adapter alone
    assert _versions(fleet) == [version, version]
    want = _offline(copy.deepcopy(policy).merge_and_unload(), model_dir)
    assert _per_replica(fleet) == [want, want]
    disk = perturbed(7)
    version = client.update_weights(disk, transport="disk", path=str(tmp_path / "ckpt"))
    assert _versions(fleet) == [version, version]
    assert _per_replica(fleet) == [_offline(disk, model_dir)] * 2


def test_a_distributed_push_through_the_one_address_reaches_both_replicas_or_neither(
    fleet: ServeFleet, client: RolloutClient, model_dir: Path
) -> None:
    """The client is rank 0 (gloo); the front gives each replica a rank (group_fanout.py)."""
    assert client.server_info().weight_group_ranks == 2
    start = _versions(fleet)
    new = perturbed(3)
    version = client.update_weights(new, "distributed", timeout_s=120)
    assert version == start[0] + 1 and _versions(fleet) == [version, version]
    want = _offline(new, model_dir)
    assert _per_replica(fleet) == [want, want]
    bad = dict(perturbed(4).state_dict())
    bad["model.norm.weight"] = torch.ones(3)  # every replica refuses it at staging
    with pytest.raises(WeightSyncError, match="model.norm.weight"):
        client.update_weights(bad, "distributed", timeout_s=120)
    assert _versions(fleet) == [version, version] and _per_replica(fleet) == [want, want]
    client.weight_pusher.close_group()


def _direct_sleep_states(fleet: ServeFleet) -> list[bool]:
    out = []
    for address in fleet.grpc_addresses:
        with RolloutClient([address]) as one:
            out.append(one.is_sleeping())
    return out


def test_sleep_and_wake_fan_out_from_servefleet_the_openai_ingress_and_the_grpc_front(
    fleet: ServeFleet, client: RolloutClient, wakes_after: None
) -> None:
    import httpx

    fleet.sleep(1)
    assert fleet.is_sleeping() and _direct_sleep_states(fleet) == [True, True]
    assert "rollout_fleet_replica_sleep_level" in client.metrics()
    done: list[list[int]] = []
    waiting = threading.Thread(
        target=lambda: done.append(client.generate(PROMPTS[:1], GREEDY)[0].outputs[0].token_ids)
    )
    waiting.start()
    time.sleep(3.0)
    assert not done  # generate while asleep waits, as on one server
    fleet.wake_up()
    waiting.join(timeout=300)
    assert done and _direct_sleep_states(fleet) == [False, False]

    root = fleet.base_url.removesuffix("/v1")
    assert httpx.post(f"{root}/sleep", params={"level": 1}, timeout=300).status_code == 200
    state = httpx.get(f"{root}/is_sleeping", timeout=300).json()
    assert state["is_sleeping"] and all(s["is_sleeping"] for s in state["replicas"].values())
    assert httpx.post(f"{root}/wake_up", timeout=300).status_code == 200
    assert _direct_sleep_states(fleet) == [False, False]

    client.sleep(1)
    assert client.is_sleeping() and _direct_sleep_states(fleet) == [True, True]
    client.wake_up()
    assert not client.is_sleeping() and _direct_sleep_states(fleet) == [False, False]


def test_a_replica_refusing_to_sleep_wakes_the_others_and_the_error_names_it(
    fleet: ServeFleet, client: RolloutClient, wakes_after: None
) -> None:
    import httpx

    first, second = fleet.grpc_addresses
    with RolloutClient([first]) as one:
        one.sleep(1)  # asleep already: it refuses the fleet's sleep
    refuser = next(d["replica"] for d in fleet.describe() if d["grpc_address"] == first)
    with pytest.raises(grpc.RpcError) as refused:
        client.sleep(1)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"replica {refuser}" in refused.value.details() and "woke" in refused.value.details()
    assert _direct_sleep_states(fleet) == [True, False]
    assert not client.is_sleeping()  # asleep only when every replica sleeps
    state = httpx.get(f"{fleet.base_url.removesuffix('/v1')}/is_sleeping", timeout=300).json()
    assert not state["is_sleeping"] and state["replicas"][refuser]["is_sleeping"]
    client.wake_up()
    assert _direct_sleep_states(fleet) == [False, False]


def test_a_replica_killed_mid_run_loses_nothing_through_the_front_and_its_replacement_sleeps_with_the_fleet(
    fleet: ServeFleet, client: RolloutClient
) -> None:
    """Runs last: kills a replica while both hold streams; then one while the fleet sleeps."""
    from tests.fleet.test_serve_fleet import _busy_replica

    params = [
        SamplingParams(max_tokens=200, temperature=1.0, ignore_eos=True, seed=100 + i) for i in range(6)
    ]
    prompts = [[20 + i, 21, 22, 23] for i in range(6)]
    replies: dict[int, list[int]] = {}

    def call(i: int) -> None:
        replies[i] = client.generate([prompts[i]], params[i])[0].outputs[0].token_ids

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    fleet.kill_replica(_busy_replica(fleet))
    for thread in threads:
        thread.join(timeout=600)
    assert sorted(replies) == list(range(6))
    for i in range(6):
        assert replies[i] == client.generate([prompts[i]], params[i])[0].outputs[0].token_ids
        assert len(replies[i]) == 200
    fleet.wait_for_replicas()
    fleet.sleep(1)
    fleet.kill_replica(fleet.replicas()[0])
    fleet.wait_for_replicas()
    assert fleet.is_sleeping()  # the replacement started asleep, as the fleet is
    fleet.wake_up()
    assert not fleet.is_sleeping()
