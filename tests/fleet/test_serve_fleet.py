"""A real local Ray Serve fleet: 2 engine replicas of a tiny chat model behind one OpenAI endpoint.

One Ray instance and one fleet for the module (starting replicas costs about a minute on 2 cores).
The tests that kill a replica run last.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

ray = pytest.importorskip("ray", reason='the fleet tests need the ray extra: pip install "rollout[ray]"')

from rollout import LLM, EngineConfig, SamplingParams  # noqa: E402
from rollout.client import RolloutClient  # noqa: E402
from rollout.fleet import ServeFleet  # noqa: E402
from rollout.fleet.fleet_update import FleetUpdateError  # noqa: E402
from rollout.protocol.generated import weights_pb2  # noqa: E402
from rollout.weights.disk import save_checkpoint  # noqa: E402
from rollout.weights.lora_export import peft_update  # noqa: E402
from tests.fleet.serve_fleet_builders import (  # noqa: E402
    BLOCK,
    MODEL_NAME,
    chat,
    finished_per_replica,
    offline_greedy,
    perturbed,
    replica_greedy,
    run_episode,
    save_chat_model,
    two_replica_fleet,
)
from tests.weights.lora_builders import set_adapter  # noqa: E402

peft = pytest.importorskip("peft")
from peft import LoraConfig, get_peft_model  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_chat_model(tmp_path_factory.mktemp("fleet") / "model")


@pytest.fixture(scope="module")
def fleet(model_dir: Path) -> Iterator[ServeFleet]:
    with two_replica_fleet(model_dir) as f:
        yield f


def test_each_turn_of_an_episode_hits_the_blocks_of_the_turn_before(fleet: ServeFleet) -> None:
    """Affinity routing: turn k+1 finds turn k's prompt blocks, whichever replica ran it."""
    for episode in range(4):
        replies = run_episode(fleet.base_url, episode, turns=3)
        for before, after in zip(replies, replies[1:], strict=False):
            reusable = before["usage"]["prompt_tokens"] // BLOCK * BLOCK
            assert after["usage"]["prompt_tokens_details"]["cached_tokens"] >= reusable > 0
    assert "rollout_fleet_prefix_hit_rate" in fleet.metrics()


def test_a_session_key_pins_unrelated_prompts_to_one_replica(fleet: ServeFleet) -> None:
    before = finished_per_replica(fleet)
    for i in range(4):
        prompt = [{"role": "user", "content": f"unrelated question {'wxyz'[i]} " * (i + 1)}]
        chat(fleet.base_url, prompt, headers={"X-Session-Id": "episode-7"})
    after = finished_per_replica(fleet)
    assert sorted(after[r] - before[r] for r in after) == [0, 4]


def test_a_streamed_chat_through_the_endpoint_carries_the_unstreamed_tokens(fleet: ServeFleet) -> None:
    messages = [{"role": "user", "content": "stream this answer"}]
    whole = chat(fleet.base_url, messages, seed=3, temperature=1.0)
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 8, "seed": 3, "temperature": 1.0}
    with httpx.stream(
        "POST", f"{fleet.base_url}/chat/completions", json={**body, "stream": True}, timeout=300
    ) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    final = [c for e in events for c in e["choices"] if c.get("finish_reason")]
    assert final[0]["token_ids"] == whole["choices"][0]["token_ids"]


def test_one_push_updates_every_replica_and_a_refused_push_changes_none(
    fleet: ServeFleet, model_dir: Path
) -> None:
    start = {d["weight_version"] for d in fleet.describe()}
    assert len(start) == 1
    new = perturbed(1)
    version = fleet.update_weights(new)
    assert version == start.pop() + 1
    assert [d["weight_version"] for d in fleet.describe()] == [version, version]
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
    offline = LLM(model=new, tokenizer=str(model_dir), config=EngineConfig(num_blocks=256, self_check=False))
    want = [
        o.outputs[0].token_ids for o in offline.generate(prompts, SamplingParams(max_tokens=6, temperature=0))
    ]
    with fleet.client() as client:
        outs = client.generate(prompts, SamplingParams(max_tokens=6, temperature=0))
    assert [o.outputs[0].token_ids for o in outs] == want
    assert {o.outputs[0].weight_version for o in outs} == {version}
    bad = dict(perturbed(2).state_dict())
    bad["model.norm.weight"] = torch.ones(3)  # the wrong shape: every replica refuses at staging
    with pytest.raises(FleetUpdateError, match="model.norm.weight"):
        fleet.update_weights(bad)
    assert [d["weight_version"] for d in fleet.describe()] == [version, version]


def test_a_disk_push_loads_the_directory_on_every_replica_and_a_bad_one_changes_none(
    fleet: ServeFleet, model_dir: Path, tmp_path: Path
) -> None:
    new = perturbed(3)
    version = fleet.update_weights(path=str(save_checkpoint(new.state_dict(), tmp_path / "v")))
    assert [d["weight_version"] for d in fleet.describe()] == [version, version]
    assert _fleet_greedy(fleet) == _offline_greedy(new, model_dir)
    bad = dict(perturbed(4).state_dict())
    bad["model.norm.weight"] = torch.ones(3)
    with pytest.raises(FleetUpdateError, match="model.norm.weight"):
        fleet.update_weights(path=str(save_checkpoint(bad, tmp_path / "bad")))
    assert [d["weight_version"] for d in fleet.describe()] == [version, version]


def test_an_adapter_push_one_replica_refuses_for_its_base_changes_neither(fleet: ServeFleet) -> None:
    """Replica 0 keeps the fleet's base under an adapter, replica 1 gets a new base (both pushed past the
    fleet, over gRPC): a fleet adapter push stages on 0, replica 1 refuses it, neither commits."""
    base = perturbed(8)
    fleet.update_weights(base)
    policy = set_adapter(get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")), 9)
    version = fleet.describe()[0]["weight_version"] + 1
    first, second = fleet.grpc_addresses
    with RolloutClient([first], token=fleet.token) as client:  # its adapter, on the fleet's base
        held = weights_pb2.WeightBase(boot_id=client.server_info().boot_id, version=version - 1)
        client.weight_pusher.bases.record(first, weights_pb2.UpdateWeightsResponse(base=held))
        client.update_weights(policy, version=version)
    with RolloutClient([second], token=fleet.token) as client:
        client.update_weights(perturbed(10), version=version)
    before = _fleet_greedy(fleet)
    with pytest.raises(FleetUpdateError, match="base") as refused:
        fleet.update_weights(set_adapter(policy, 11))
    named = re.findall(r"replica (\w+): ", str(refused.value))  # the refusal names one replica
    assert "staging" in str(refused.value) and len(named) == 1 and "BaseMismatchError" in str(refused.value)
    assert refused.value.versions == dict.fromkeys(fleet.replicas(), version)
    assert _fleet_greedy(fleet) == before and before[0] != before[1]
    fleet.update_weights(perturbed(8))  # one base again for the tests after


def test_an_adapter_push_merges_on_every_replicas_base_and_a_bad_one_changes_none(
    fleet: ServeFleet, model_dir: Path
) -> None:
    base = perturbed(5)
    fleet.update_weights(base)
    policy = set_adapter(get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")), 6)
    version = fleet.update_weights(policy)  # the adapter alone, merged on the base just pushed
    assert [d["weight_version"] for d in fleet.describe()] == [version, version]
    assert _fleet_greedy(fleet) == _offline_greedy(copy.deepcopy(policy).merge_and_unload(), model_dir)
    ledger = ray.get(fleet._ledger.latest.remote())  # the full push made the updates before it moot
    assert [v for v, _ in ledger] == [version - 1, version]
    named, targets = peft_update(set_adapter(policy, 7))
    module = next(iter(targets))
    named = [(n, torch.ones(2, 2) if n == f"{module}.lora_A.weight" else t) for n, t in named]
    with pytest.raises(FleetUpdateError, match=module):
        fleet.update_weights(dict(named), lora=targets)
    assert [d["weight_version"] for d in fleet.describe()] == [version, version]


GREEDY = SamplingParams(max_tokens=6, temperature=0)
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]


def _fleet_greedy(fleet: ServeFleet) -> list[list[list[int]]]:
    return replica_greedy(fleet, PROMPTS, GREEDY)


def _offline_greedy(model: torch.nn.Module, model_dir: Path) -> list[list[list[int]]]:
    return [offline_greedy(model, model_dir, PROMPTS, GREEDY)] * 2


def test_a_replica_killed_mid_request_loses_nothing_and_its_replacement_serves_the_fleet_version(
    fleet: ServeFleet,
) -> None:
    """Runs last: it kills a replica (a crash) while both hold requests."""
    version = fleet.describe()[0]["weight_version"]
    fields = dict(max_tokens=200, temperature=1.0, ignore_eos=True)
    prompts = [[{"role": "user", "content": f"long answer {'abcdef'[i]}"}] for i in range(6)]
    replies: dict[int, dict] = {}

    def call(i: int) -> None:
        replies[i] = chat(fleet.base_url, prompts[i], seed=100 + i, **fields)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    victim = _busy_replica(fleet)
    fleet.kill_replica(victim)
    for thread in threads:
        thread.join(timeout=600)
    assert sorted(replies) == list(range(6))
    again = [chat(fleet.base_url, prompts[i], seed=100 + i, **fields) for i in range(6)]
    for i in range(6):
        assert replies[i]["choices"][0]["token_ids"] == again[i]["choices"][0]["token_ids"]
        assert len(replies[i]["choices"][0]["token_ids"]) == 200
    described = fleet.wait_for_replicas()
    assert victim not in {d["replica"] for d in described}
    assert [d["weight_version"] for d in described] == [version, version]
    first, second = _fleet_greedy(fleet)  # the replacement replayed every update, adapters included
    assert first == second


def test_a_stream_whose_replica_dies_mid_reply_goes_on_exactly_from_another_replica(
    fleet: ServeFleet,
) -> None:
    """Runs after the kill above (a second replica killed): the caller's one stream, no error event,
    every token once, the same as the seeded non-streamed reply."""
    fleet.wait_for_replicas()
    messages = [{"role": "user", "content": "stream a long answer"}]
    fields = dict(max_tokens=460, temperature=1.0, ignore_eos=True, seed=11, logprobs=True)
    whole = chat(fleet.base_url, messages, **fields)["choices"][0]
    body = {"model": MODEL_NAME, "messages": messages, "stream": True, **fields}
    events, killed = [], []
    with httpx.stream("POST", f"{fleet.base_url}/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))
                if not killed and any(c["delta"].get("content") for c in events[-1].get("choices", [])):
                    killed.append(_busy_replica(fleet, limit_s=60))
                    fleet.kill_replica(killed[0])
    assert killed and not [e for e in events if "error" in e]
    choices = [c for e in events for c in e["choices"]]
    assert "".join(c["delta"].get("content") or "" for c in choices) == whole["message"]["content"]
    streamed = [t["token"] for c in choices for t in (c.get("logprobs") or {}).get("content") or []]
    assert streamed == [t["token"] for t in whole["logprobs"]["content"]]
    assert [c for c in choices if c["finish_reason"]][0]["token_ids"] == whole["token_ids"]
    assert len({e["id"] for e in events}) == 1


def _busy_replica(fleet: ServeFleet, limit_s: float = 3600.0) -> str:
    from rollout.fleet.replica_calls import Targeted

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for replica in fleet.replicas():
            stats = fleet.handle.stats.remote(Targeted(replica)).result(timeout_s=120)
            if stats.get("num_running_seqs", 0) > 0:
                return replica
    pytest.fail(f"no replica was running a request within {limit_s}s")
