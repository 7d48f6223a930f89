"""Load-based spreading over several servers, and failing over when one stops answering."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.client.load_balance import LoadBalancer, NoLiveServerError, prompt_cost
from tests.builders import random_prompts, tiny_llm
from tests.server.server_builders import make_engine, serving, slow_steps, wait_for

GREEDY = SamplingParams(n=2, max_tokens=6, temperature=0.0)


def test_each_prompt_goes_to_the_least_loaded_server() -> None:
    balancer = LoadBalancer(["a", "b", "c"])
    assert balancer.assign([10]) == {"a": [0]}
    assert balancer.assign([4, 4, 3, 1]) == {"b": [0, 2], "c": [1, 3]}  # a holds 10; ties by order
    assert balancer.load("a") == 10
    balancer.release("a", 10)
    assert balancer.assign([7]) == {"a": [0]}


def test_loads_are_what_is_outstanding_and_dead_servers_get_nothing() -> None:
    balancer = LoadBalancer(["a", "b"])
    shards = balancer.assign([prompt_cost(5, n=2, max_tokens=10)] * 4)
    assert shards == {"a": [0, 2], "b": [1, 3]}
    balancer.release("a", 2 * 25)
    assert balancer.assign([1]) == {"a": [0]}  # b still holds 50 tokens
    balancer.mark_dead("a", "UNAVAILABLE: gone")
    assert balancer.assign([1, 1]) == {"b": [0, 1]}
    balancer.mark_dead("b", "UNAVAILABLE: gone too")
    with pytest.raises(NoLiveServerError, match="a \\(UNAVAILABLE: gone\\).*b"):
        balancer.assign([1])


def test_giving_up_keeps_the_last_live_server_and_agrees_across_calls() -> None:
    balancer = LoadBalancer(["a", "b"])
    assert balancer.give_up("a", "UNAVAILABLE: gone")
    assert balancer.give_up("a", "UNAVAILABLE: seen by a second call")  # already given up: re-route
    assert not balancer.give_up("b", "UNAVAILABLE: gone too")  # the last live server is kept
    assert balancer.dead == {"a": "UNAVAILABLE: gone"} and balancer.live() == ["b"]


def test_a_busy_server_gets_the_next_prompts_after_an_idle_one() -> None:
    with serving() as a, serving() as b, RolloutClient([a.address, b.address]) as client:
        client.balancer.assign([10_000])  # as if a long call from this client were still on a
        client.generate(random_prompts(3, 4, 8, seed=1), GREEDY)
        assert [s.loop.counters["accepted"] for s in (a, b)] == [0, 3]


def test_a_stopped_server_is_skipped_and_its_prompts_answered_by_the_others() -> None:
    prompts = random_prompts(6, 3, 20, seed=4)
    expected = [o.outputs for o in tiny_llm(max_num_seqs=64).generate(prompts, GREEDY)]
    with serving() as a, serving() as b, RolloutClient([a.address, b.address], max_retries=1) as client:
        a.stop(grace=0.0)
        outputs = client.generate(prompts, GREEDY)
        assert list(client.dead_servers) == [a.address]
        assert b.loop.counters["accepted"] == 6
        again = client.generate(prompts[:2], GREEDY, request_id_prefix="later")
    assert [o.outputs for o in outputs] == expected
    assert [o.outputs for o in again] == expected[:2]


def test_a_server_killed_mid_call_is_reported_and_the_call_finishes_on_the_other() -> None:
    prompts = random_prompts(4, 3, 20, seed=5)
    expected = [o.outputs for o in tiny_llm(max_num_seqs=64).generate(prompts, GREEDY)]
    slow = make_engine()
    slow_steps(slow, delay=0.2)  # its prompts are still generating when it is stopped
    with serving(slow) as a, serving() as b, RolloutClient([a.address, b.address], max_retries=1) as client:
        result: dict[str, object] = {}
        call = threading.Thread(target=lambda: result.update(out=client.generate(prompts, GREEDY)))
        call.start()
        wait_for(lambda: a.loop.counters["accepted"] >= 1, what="a's share started")
        a.server.stop(grace=0).wait()  # its port closes mid-stream, as when the process dies
        call.join(timeout=60)
        assert not call.is_alive()
        assert a.address in client.dead_servers
    assert [o.outputs for o in result["out"]] == expected


def test_a_single_server_is_never_given_up_on() -> None:
    """Its error is the call's (a restarted server must stay usable by the same client)."""
    with serving() as server, RolloutClient(server.address, max_retries=1) as client:
        server.stop(grace=0.0)
        with pytest.raises(grpc.RpcError) as info:
            client.generate([[5, 6]], GREEDY)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert client.dead_servers == {}


def test_a_dead_server_is_probed_at_most_once_per_interval_and_revived_takes_work() -> None:
    balancer = LoadBalancer(["a", "b"], probe_interval_s=2.0)
    balancer.mark_dead("a", "UNAVAILABLE")
    t0 = time.monotonic() + 1e6  # far past the marking: due at once
    assert balancer.due_for_probe(now=t0) == ["a"]
    assert balancer.due_for_probe(now=t0 + 1.9) == []  # probed 1.9 s ago
    assert balancer.due_for_probe(now=t0 + 2.0) == ["a"]
    assert balancer.assign([5, 5]) == {"b": [0, 1]}
    balancer.revive("a")
    assert balancer.due_for_probe(now=t0 + 10) == []  # live servers are never probed
    assert balancer.assign([1]) == {"a": [0]}  # b holds 10
    assert balancer.dead == {}


def test_wait_until_ready_gives_a_written_off_server_that_serves_again_its_work_back() -> None:
    """A trainer that waits for its servers after a restart keeps its client: the wait revives them."""
    prompts = random_prompts(4, 2, 20, seed=6)
    with serving() as b:
        with serving() as a:
            address_a, port_a = a.address, a.port
            client = RolloutClient([address_a, b.address], max_retries=1)
        client.generate(prompts, GREEDY)  # a is gone: written off
        assert address_a in client.dead_servers
        with serving(make_engine(), port=port_a) as back:
            client.wait_until_ready(60)
            assert client.dead_servers == {}
            client.generate(prompts, GREEDY)
            assert back.loop.counters["accepted"] > 0  # prompts reach it on the very next call
        client.close()


def test_a_server_written_off_gets_prompts_again_once_it_is_back() -> None:
    """Failover writes a dead server off for the client; a restart on the same address must get
    traffic again within seconds (a health probe before each call, at most every 2 s per server)."""
    prompts = random_prompts(6, 2, 20, seed=5)
    with serving() as b:
        with serving() as a:
            address_a, port_a = a.address, a.port
            client = RolloutClient([address_a, b.address], max_retries=1)
        client.generate(prompts, GREEDY)  # a is gone: every prompt fails over to b
        assert address_a in client.dead_servers
        with serving(make_engine(), port=port_a) as back:
            deadline = time.monotonic() + 60  # seconds quiet; a busy machine stretches them
            while not back.loop.counters["accepted"] and time.monotonic() < deadline:
                client.generate(prompts, GREEDY)
                time.sleep(0.5)
            assert back.loop.counters["accepted"] > 0
            assert client.dead_servers == {}
        client.close()
