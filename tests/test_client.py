"""RolloutClient: several servers, idempotent retries, deadlines, readiness and control calls."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from tests.builders import random_prompts, tiny_llm
from tests.server.server_builders import make_engine, serving, slow_steps, wait_for

GREEDY = SamplingParams(n=2, max_tokens=6, temperature=0.0)


def test_several_servers_share_the_prompts_and_results_keep_prompt_order() -> None:
    prompts = random_prompts(7, 2, 30, seed=3)
    expected = [o.outputs for o in tiny_llm(max_num_seqs=64).generate(prompts, GREEDY)]
    with serving() as a, serving() as b, RolloutClient([a.address, b.address]) as client:
        outputs = client.generate(prompts, GREEDY)
        served = [s.loop.counters["accepted"] for s in (a, b)]
        tokens = [s.loop.stats()["num_prompt_tokens_computed"] for s in (a, b)]
    assert [o.outputs for o in outputs] == expected
    assert [o.prompt_token_ids for o in outputs] == prompts
    assert sum(served) == 7 and min(served) >= 1  # each prompt's n samples stayed on one server
    assert abs(tokens[0] - tokens[1]) <= max(len(p) for p in prompts)  # spread by load, not by count


def test_reusing_a_request_id_prefix_returns_the_first_results_without_generating() -> None:
    sampled = SamplingParams(n=3, max_tokens=8, temperature=1.0)
    with serving() as server, RolloutClient(server.address) as client:
        first = client.generate([[5, 6, 7]], sampled, request_id_prefix="step-1")
        tokens = server.loop.stats()["num_generated_tokens"]
        again = client.generate([[5, 6, 7]], sampled, request_id_prefix="step-1")
        assert server.loop.stats()["num_generated_tokens"] == tokens
    assert again[0].outputs == first[0].outputs and again[0].request_id == "step-1-0"


def test_unavailable_server_is_retried_until_it_resumes() -> None:
    with serving() as server, RolloutClient(server.address, max_retries=8) as client:
        client.pause()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.generate, [[5, 6]], GREEDY)
            wait_for(lambda: server.loop.counters["rejected_unavailable"] >= 1, what="a refused attempt")
            client.resume()
            out = pending.result(timeout=30)
        assert server.loop.counters["accepted"] == 1
    assert len(out[0].outputs) == 2


def test_deadline_exceeded_aborts_the_request_on_the_server() -> None:
    long = SamplingParams(n=2, max_tokens=450, ignore_eos=True)
    engine = make_engine()
    finished = slow_steps(engine)  # 450 steps take over 4 s, far past the deadline
    with serving(engine) as server, RolloutClient(server.address) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.generate([list(range(3, 50))], long, request_id_prefix="late", timeout=0.5)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert server.loop.counters["accepted"] == 1, "the request never reached the server"
        wait_for(lambda: server.loop.stats()["num_requests_unfinished"] == 0, what="no unfinished request")
        stats = server.loop.call(lambda e: e.stats())
    assert [c.finish_reason for c in finished["late-0"]] == ["abort", "abort"]
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


def test_abort_by_request_id_finishes_samples_with_abort() -> None:
    long = SamplingParams(n=2, max_tokens=450, ignore_eos=True)
    engine = make_engine()
    slow_steps(engine)  # 450 steps take over 4 s: only the abort can end it sooner
    with serving(engine) as server, RolloutClient(server.address) as client:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.generate, [[5, 6, 7]], long, "job")
            wait_for(lambda: server.loop.stats()["num_running_seqs"] == 2, what="2 running samples")
            assert client.abort("job-0")
            out = pending.result(timeout=30)
        assert not client.abort("job-0")  # finished now
    assert [c.finish_reason for c in out[0].outputs] == ["abort", "abort"]
    assert all(len(c.token_ids) < 450 for c in out[0].outputs)


def test_wait_until_ready_times_out_without_a_server() -> None:
    with RolloutClient("127.0.0.1:1") as client, pytest.raises(TimeoutError, match="127.0.0.1:1"):
        client.wait_until_ready(timeout=0.3)


def test_reset_prefix_cache_and_server_info_reach_the_server() -> None:
    with serving() as server, RolloutClient(server.address) as client:
        client.wait_until_ready(timeout=10)
        client.generate([list(range(3, 40))], GREEDY)
        assert client.server_info().num_blocks_cached > 0
        client.reset_prefix_cache()
        assert client.server_info().num_blocks_cached == 0


def test_prompts_of_the_wrong_shape_are_refused_before_any_call() -> None:
    with RolloutClient("127.0.0.1:1") as client, pytest.raises(ValueError, match=r"prompts\[1\]"):
        client.generate([[5], [1.5]], GREEDY)


def test_one_sampling_params_per_prompt_gives_what_the_offline_llm_gives() -> None:
    prompts = random_prompts(5, 2, 20, seed=4)
    params = [
        SamplingParams(n=1 + i % 2, max_tokens=3 + i, temperature=0.0 if i % 2 else 1.0, seed=i)
        for i in range(5)
    ]
    params[4] = params[0]  # prompts that share params go in one call
    expected = tiny_llm(max_num_seqs=64).generate(prompts, params)
    with serving() as server, RolloutClient(server.address) as client:
        outputs = client.generate(prompts, params)
        with pytest.raises(ValueError, match="^params: 2 SamplingParams for 5 prompts"):
            client.generate(prompts, params[:2])
    assert [o.outputs for o in outputs] == [o.outputs for o in expected]
    assert [o.prompt_token_ids for o in outputs] == prompts


def test_a_restarted_server_gets_traffic_again_from_a_fresh_client_and_the_old_one() -> None:
    """A fresh client must not inherit the reconnect backoff of another client's connection (gRPC
    shared one per address across the process: its first call got "Connection refused")."""
    with serving() as first:
        address, port = first.address, first.port
        old = RolloutClient(address)
        expected = old.generate([[5, 6, 7]], GREEDY)[0].outputs
    engine = make_engine()
    with pytest.raises(TimeoutError):
        old.wait_until_ready(timeout=12)  # gRPC backs off between reconnects: 1 s, 1.6 s, 2.6 s, 4.1 s...
    with serving(engine, port=port), RolloutClient(address, max_retries=0) as fresh:
        assert fresh.generate([[5, 6, 7]], GREEDY)[0].outputs == expected  # its very first call
        old.wait_until_ready(timeout=60)  # its next reconnect may be 10 s away, more on a busy machine
        assert old.generate([[5, 6, 7]], GREEDY)[0].outputs == expected
    old.close()


def test_a_closed_client_refuses_every_call_instead_of_crashing_the_process() -> None:
    """gRPC aborts the whole process on a call through a closed channel: the client says it is closed."""
    with serving() as server:
        client = RolloutClient(server.address)
        client.close()
        calls = {
            "generate": lambda: client.generate([[5, 6, 7]], GREEDY),
            "score": lambda: client.score([[5, 6, 7]]),
            "server_info": client.server_info,
            "metrics": client.metrics,
            "wait_until_ready": client.wait_until_ready,
            "update_weights": lambda: client.update_weights({}),
        }
        for name, call in calls.items():
            with pytest.raises(RuntimeError, match="RolloutClient is closed"):
                call()
                pytest.fail(f"{name} ran on a closed client")
