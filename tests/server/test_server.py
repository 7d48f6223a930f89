"""A real server on a loopback port: same results as offline, clients batched together, no leaks."""

from __future__ import annotations

import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rollout import SamplingParams
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.server.engine_loop import EngineLoop
from rollout.server.metrics import Metrics, serve_metrics_http
from rollout.server.servicer import RolloutServicer
from tests.builders import random_prompts, tiny_llm
from tests.server.server_builders import client_for, make_engine, serving, slow_steps, wait_for


def test_greedy_through_the_client_equals_offline_llm() -> None:
    prompts = random_prompts(6, 3, 40, seed=1)
    params = SamplingParams(n=3, max_tokens=12, temperature=0.0, logprobs=2)
    offline = tiny_llm(max_num_seqs=64).generate(prompts, params)
    with serving() as server, client_for(server) as client:
        online = client.generate(prompts, params)
    assert [o.prompt_token_ids for o in online] == prompts
    assert [o.outputs for o in online] == [o.outputs for o in offline]


def test_sampled_top_logprobs_through_the_client_equal_offline_sampled_token_included() -> None:
    prompts = random_prompts(4, 3, 30, seed=3)
    params = SamplingParams(n=2, max_tokens=12, temperature=2.0, seed=1, logprobs=1)
    offline = tiny_llm(max_num_seqs=64).generate(prompts, params)
    with serving() as server, client_for(server) as client:
        online = client.generate(prompts, params)
    assert [o.outputs for o in online] == [o.outputs for o in offline]
    tops = [top for o in online for s in o.outputs for top in s.top_logprobs]
    assert max(len(top) for top in tops) == 2  # some sampled tokens came from outside the top 1


def test_concurrent_clients_each_get_what_they_get_alone_and_no_block_leaks() -> None:
    prompts = random_prompts(32, 2, 60, seed=2)
    shapes = [SamplingParams(n=1 + i % 4, max_tokens=4 + (i * 7) % 20, temperature=0.0) for i in range(32)]
    alone_llm = tiny_llm(max_num_seqs=64)
    alone = [alone_llm.generate([p], s)[0].outputs for p, s in zip(prompts, shapes, strict=True)]
    engine = make_engine()
    slow_steps(engine, delay=0.005)  # requests last long enough to overlap however the threads start
    with serving(engine) as server:
        running, done = [], threading.Event()

        def watch() -> None:  # how many sequences the engine ran in one step, from its snapshots
            while not done.is_set():
                running.append(int(server.loop.stats()["num_running_seqs"]))
                time.sleep(0.002)

        def one_client(job: tuple[list[int], SamplingParams]) -> list:
            with client_for(server, timeout=60) as client:  # a client (and channel) per caller
                return client.generate([job[0]], job[1])[0].outputs

        watcher = threading.Thread(target=watch)
        watcher.start()
        with ThreadPoolExecutor(32) as pool:
            together = list(pool.map(one_client, zip(prompts, shapes, strict=True)))
        done.set()
        watcher.join(10)
        stats = server.loop.call(lambda e: e.stats())
    assert together == alone
    assert max(running) >= 16  # the clients' requests shared engine steps
    assert stats["num_blocks_free"] == stats["num_blocks_total"]
    assert stats["num_running_seqs"] == stats["num_waiting_seqs"] == 0


def test_cancelled_stream_aborts_its_request_frees_its_blocks_and_others_are_unaffected() -> None:
    long_params = pb.SamplingParams(n=4, max_tokens=450, ignore_eos=True)
    prompt = pb.Prompt(token_ids=pb.TokenIds(ids=list(range(3, 40))))
    short = SamplingParams(n=2, max_tokens=8, temperature=0.0)
    expected = tiny_llm(max_num_seqs=64).generate([[5, 6, 7]], short)[0].outputs
    engine = make_engine()
    finished = slow_steps(engine)  # 450 steps take over 4 s: only a cancel can end it sooner
    with serving(engine) as server, client_for(server) as client:
        stream = client.stubs[server.address].Generate(
            pb.GenerateRequest(request_id="long", prompts=[prompt], params=long_params)
        )
        wait_for(lambda: server.loop.stats()["num_running_seqs"] == 4, what="4 running samples")
        result: list = []
        other = threading.Thread(target=lambda: result.append(client.generate([[5, 6, 7]], short)))
        other.start()
        stream.cancel()
        other.join(30)
        assert not other.is_alive(), "the other client's request did not finish"
        wait_for(lambda: server.loop.stats()["num_requests_unfinished"] == 0, what="no unfinished request")
        stats = server.loop.call(lambda e: e.stats())
    assert result[0][0].outputs == expected
    cut = finished["long-0"]
    assert [c.finish_reason for c in cut] == ["abort"] * 4
    assert all(len(c.token_ids) < 450 for c in cut)
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


class _EndedContext:
    """The context of an RPC whose client left before the handler registered its callbacks."""

    def add_callback(self, callback: object) -> bool:
        return False  # what gRPC answers once the RPC has terminated

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AssertionError(f"unexpected abort: {code} {details}")

    def invocation_metadata(self) -> tuple:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"


def test_a_client_gone_before_the_handler_registers_its_callback_still_aborts_its_request() -> None:
    engine = make_engine()
    slow_steps(engine)  # 450 steps take over 4 s: only an abort can end it sooner
    request = pb.GenerateRequest(
        request_id="gone",
        prompts=[pb.Prompt(token_ids=pb.TokenIds(ids=[5, 6, 7]))],
        params=pb.SamplingParams(n=2, max_tokens=450, ignore_eos=True),
    )
    with EngineLoop(engine).start() as loop:
        servicer = RolloutServicer(loop, Metrics(loop))
        assert list(servicer.Generate(request, _EndedContext())) == []
        wait_for(lambda: loop.stats()["num_requests_unfinished"] == 0, what="no unfinished request")
        stats = loop.call(lambda e: e.stats())
    assert loop.counters["finished"] == 1 and stats["num_generated_tokens"] < 450
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


def test_health_reports_serving() -> None:
    with serving() as server, grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "rollout.v1.RolloutService"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_server_info_describes_model_and_cache() -> None:
    with serving(make_engine(num_blocks=100)) as server, client_for(server) as client:
        info = client.server_info()
    assert (info.vocab_size, info.num_blocks_total, info.num_blocks_free, info.block_size) == (
        128,
        100,
        100,
        16,
    )
    assert info.dtype == "float32" and info.weight_version == 0
    assert info.logprobs_modes == ("processed_logprobs", "raw_logprobs", "raw_logits", "processed_logits")
    assert info.default_logprobs_mode == "processed_logprobs"


def test_server_info_reports_a_hybrid_models_state_budget() -> None:
    """A hybrid model's recurrent states come out of the cache budget: GetServerInfo says how much."""
    from rollout import EngineConfig
    from rollout.engine.llm_engine import LLMEngine
    from tests.models.zoo import HYBRID, build

    qwen3_next = next(f for f in HYBRID if f.model_type == "qwen3_next")
    engine = LLMEngine(build(qwen3_next), config=EngineConfig(num_blocks=64, max_num_seqs=8))
    with serving(engine) as server, client_for(server) as client:
        info = client.server_info()
    assert info.state_bytes_per_seq == engine.stats()["state_bytes_per_seq"] > 0
    assert (info.prefix_caching, info.max_state_snapshots) == (True, 8)
    with serving() as server, client_for(server) as client:
        plain = client.server_info()
    assert (plain.prefix_caching, plain.state_bytes_per_seq, plain.max_state_snapshots) == (True, 0, 0)


def test_metrics_are_prometheus_text_over_grpc_and_http() -> None:
    with serving() as server, client_for(server) as client:
        client.generate([[5, 6, 7]], SamplingParams(max_tokens=5, temperature=0.0))
        text = client.metrics()
        http = serve_metrics_http(server.metrics, 0)
        try:
            url = f"http://127.0.0.1:{http.server_address[1]}/metrics"
            scraped = urllib.request.urlopen(url, timeout=5).read().decode()
        finally:
            http.shutdown()
    for line in ("rollout_requests_total 1", "rollout_generated_tokens_total 5", "rollout_weight_version 0"):
        assert line in text and line in scraped
    assert "# TYPE rollout_kv_cache_usage_ratio gauge" in text
    (rate,) = [line for line in text.splitlines() if line.startswith("rollout_generation_tokens_per_second ")]
    assert float(rate.split()[1]) > 0  # the first scrape already counts the 5 tokens since start


def test_tokens_per_second_is_the_rate_over_the_window() -> None:
    with serving() as server:
        metrics = server.metrics
        t0, g0 = metrics._history[0]
        assert metrics.tokens_per_second(g0 + 100, now=t0 + 2.0) == 50.0
        assert metrics.tokens_per_second(g0 + 400, now=t0 + 4.0) == 100.0  # still inside the 30 s window
        # old points leave; t0 + 40.0 - (t0 + 4.0) rounds differently for every t0 the clock gives
        assert metrics.tokens_per_second(g0 + 700, now=t0 + 40.0) == pytest.approx((700 - 400) / (40.0 - 4.0))
