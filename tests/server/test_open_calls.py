"""Open generate calls are bounded: health, metrics and admin calls answer however many streams are
open, and a generate call beyond the bound is RESOURCE_EXHAUSTED at once, not queued."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rollout.protocol.generated import rollout_pb2 as pb
from rollout.server.app import DEFAULT_MAX_GENERATE_CALLS
from rollout.server.servicer import SERVICE_NAME
from tests.server.server_builders import client_for, make_engine, serving, slow_steps, wait_for

LONG = pb.SamplingParams(n=1, max_tokens=400, ignore_eos=True)


@contextlib.contextmanager
def open_streams(
    channel: grpc.Channel, count: int, params: pb.SamplingParams = LONG
) -> Iterator[list[grpc.Call]]:
    """`count` Generate streams of one long prompt each, cancelled on exit."""
    generate = channel.unary_stream(
        "/rollout.v1.RolloutService/Generate",
        request_serializer=pb.GenerateRequest.SerializeToString,
        response_deserializer=pb.GenerateResponse.FromString,
    )
    prompt = pb.Prompt(token_ids=pb.TokenIds(ids=[5, 6, 7]))
    calls = [generate(pb.GenerateRequest(prompts=[prompt], params=params), timeout=120) for _ in range(count)]
    try:
        yield calls
    finally:
        for call in calls:
            call.cancel()


def test_health_metrics_and_info_answer_while_more_streams_are_open_than_generate_threads() -> None:
    """1,000 open streams held every RPC thread and a health check waited 9.9 s behind them. One caller
    (one channel) gets the bound less the reserve kept for other callers (rollout/server/admission.py)."""
    engine = make_engine(max_num_seqs=16)
    slow_steps(engine, delay=0.05)  # 400 steps: the streams stay open for the whole test
    count = DEFAULT_MAX_GENERATE_CALLS + 44
    one_caller = DEFAULT_MAX_GENERATE_CALLS - DEFAULT_MAX_GENERATE_CALLS // 8
    loop_kwargs = {"max_pending_requests": count}
    with serving(engine, loop_kwargs) as server, client_for(server, timeout=5, max_retries=0) as client:
        channel = client.channels[server.address]
        with open_streams(channel, count) as calls:
            wait_for(lambda: server.loop.counters["accepted"] == one_caller, what="open calls")
            health = health_pb2_grpc.HealthStub(channel)
            reply = health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=2)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            assert "rollout_requests_total" in client.metrics()
            assert client.server_info().vocab_size > 0
            wait_for(lambda: sum(c.done() for c in calls) == count - one_caller, what="refusals")
            refused = {c.code() for c in calls if c.done()}
        assert refused == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert server.loop.counters["accepted"] == one_caller


def test_a_generate_call_beyond_the_bound_is_resource_exhausted_and_a_freed_slot_is_reused() -> None:
    engine = make_engine()
    slow_steps(engine, delay=0.05)
    with serving(engine, max_generate_calls=3) as server, client_for(server, max_retries=0) as client:
        channel = client.channels[server.address]
        with open_streams(channel, 3) as held:
            wait_for(lambda: server.loop.counters["accepted"] == 3, what="three open calls")
            with open_streams(channel, 1) as (extra,):
                assert extra.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "3 open generate calls: the server's limit" in extra.details()
            held[0].cancel()  # its slot is given back when the RPC ends, before its request is aborted
            wait_for(
                lambda: server.loop.stats()["num_requests_unfinished"] == 2, what="the cancelled one gone"
            )
            with open_streams(channel, 1) as (again,):
                wait_for(lambda: server.loop.counters["accepted"] == 4, what="a call in the freed slot")
                assert not again.done()
