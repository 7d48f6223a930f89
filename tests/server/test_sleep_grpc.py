"""Sleep mode over gRPC (Sleep / WakeUp / IsSleeping) on a real loopback server: outputs after a wake-up equal a
fresh engine's; requests sent while asleep wait (or are refused by setting) and lose nothing; level 2's weights
come back through a push; refusals carry the status code that says why and change nothing."""

from __future__ import annotations

import threading

import grpc
import pytest

from rollout import SamplingParams
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from tests.builders import random_prompts, tiny_llm, tiny_model
from tests.server.server_builders import client_for, make_engine, serving, slow_steps, wait_for
from tests.weights.server_builders import weight_server

PROMPTS = random_prompts(3, 5, 30, seed=4)
SEEDED = SamplingParams(n=2, max_tokens=10, temperature=1.0, seed=3, logprobs=1)


def samples(llm_or_client) -> list[tuple]:
    outs = llm_or_client.generate(PROMPTS, SEEDED)
    return [(c.token_ids, c.token_logprobs) for out in outs for c in out.outputs]


def code_of(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("level", [1, 2])
def test_a_server_woken_up_generates_what_a_fresh_engine_generates(level: int) -> None:
    with weight_server(seed=1) as server, client_for(server) as client:
        samples(client)
        assert client.sleep(level=level) > 0
        state = server.loop.engine.memory
        assert client.is_sleeping() and state.level == level
        client.wake_up(tags=["weights"])
        if level == 2:
            client.update_weights(tiny_model(seed=1), transport="grpc")
        client.wake_up(tags=["kv_cache"])
        assert not client.is_sleeping()
        assert samples(client) == samples(tiny_llm(seed=1))


def test_requests_sent_while_asleep_wait_for_the_weights_a_push_restores() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        client.sleep(level=2)
        client.wake_up()
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        assert stub.IsSleeping(pb.IsSleepingRequest(), timeout=60).awaiting_weights
        results: list = []
        waiting = threading.Thread(target=lambda: results.append(samples(client)))
        waiting.start()
        wait_for(
            lambda: server.loop.stats()["num_requests_queued"] == 3, what="queued while awaiting weights"
        )
        assert not results
        client.update_weights(tiny_model(seed=2), transport="grpc")
        waiting.join(timeout=300)
        assert results == [samples(tiny_llm(seed=2))]
        assert not stub.IsSleeping(pb.IsSleepingRequest(), timeout=60).awaiting_weights


def test_sleep_waits_for_running_requests_which_finish_whole() -> None:
    engine = make_engine(seed=0)
    slow_steps(engine, delay=0.02)
    with serving(engine) as server, client_for(server) as client:
        long = SamplingParams(max_tokens=60, temperature=0.0, ignore_eos=True)
        results: list = []
        running = threading.Thread(target=lambda: results.append(client.generate(PROMPTS[:1], long)))
        running.start()
        wait_for(lambda: engine.has_unfinished_requests(), what="the request running")
        client.sleep(level=1)
        running.join(timeout=300)
        assert results[0][0].outputs[0].finish_reason == "length"
        assert len(results[0][0].outputs[0].token_ids) == 60


def test_refuse_mode_answers_unavailable_while_asleep() -> None:
    with serving(loop_kwargs={"sleep_requests": "refuse"}) as server, client_for(server) as client:
        client.sleep(level=1)
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        request = pb.GenerateBatchRequest(prompts=[pb.Prompt(token_ids=pb.TokenIds(ids=PROMPTS[0]))])
        with pytest.raises(grpc.RpcError) as refused:
            stub.GenerateBatch(request, timeout=60)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "asleep" in refused.value.details()
        client.wake_up()
        assert len(samples(client)) == 6


def test_refusals_name_the_reason_and_change_nothing() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        assert (
            code_of(lambda: stub.Sleep(pb.SleepRequest(level=3), timeout=60))
            == grpc.StatusCode.INVALID_ARGUMENT
        )
        assert code_of(lambda: stub.WakeUp(pb.WakeUpRequest(tags=["kv"]), timeout=60)) == (
            grpc.StatusCode.INVALID_ARGUMENT
        )
        assert not client.is_sleeping()
        client.sleep(level=1)
        assert code_of(lambda: stub.Sleep(pb.SleepRequest(level=2), timeout=60)) == (
            grpc.StatusCode.FAILED_PRECONDITION
        )
        with pytest.raises(Exception, match=r"wake_up\(tags=\['weights'\]\)"):
            client.update_weights(tiny_model(seed=1), transport="grpc")
        client.wake_up()
        assert server.loop.engine.weight_version == 0
        assert samples(client) == samples(tiny_llm(seed=0))


def test_sleep_needs_the_token_like_weight_updates() -> None:
    with serving(token="s3cret") as server:
        stub = pb_grpc.RolloutServiceStub(grpc.insecure_channel(server.address))
        for call in (stub.Sleep, stub.WakeUp, stub.IsSleeping):
            request = call._method.decode().rsplit("/", 1)[1]  # the RPC's own request message
            message = getattr(pb, f"{request}Request")()
            assert code_of(lambda c=call, m=message: c(m, timeout=60)) == grpc.StatusCode.UNAUTHENTICATED
        assert not server.loop.engine.memory.is_sleeping()
