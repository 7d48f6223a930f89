"""Bad input gets the right status code and a message naming the field; the server keeps serving."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.server.app import RolloutServer
from tests.builders import char_tokenizer
from tests.server.server_builders import make_engine, serving, wait_for

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _prompt(ids: list[int]) -> pb.Prompt:
    return pb.Prompt(token_ids=pb.TokenIds(ids=ids))


def _chat(content: str) -> pb.Prompt:
    return pb.Prompt(chat=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content=content)]))


def _refusal(server: RolloutServer, request: pb.GenerateRequest) -> tuple[grpc.StatusCode, str]:
    """The status code and details of a Generate call that must fail."""
    with RolloutClient(server.address, max_retries=0) as client, pytest.raises(grpc.RpcError) as info:
        list(client.stubs[server.address].Generate(request, timeout=10))
    return info.value.code(), info.value.details()


CASES = {
    "empty prompt": (pb.Prompt(token_ids=pb.TokenIds()), pb.SamplingParams(), INVALID, "prompt_token_ids"),
    "no prompt set": (pb.Prompt(), pb.SamplingParams(), INVALID, "prompts[0]"),
    "empty text": (pb.Prompt(text=""), pb.SamplingParams(), INVALID, "text"),
    "token id >= vocab": (_prompt([1, 128]), pb.SamplingParams(), INVALID, "prompt_token_ids"),
    "negative token id": (_prompt([-1]), pb.SamplingParams(), INVALID, "prompt_token_ids"),
    "n = 0": (_prompt([5]), pb.SamplingParams(n=0), INVALID, "n must be"),
    "n huge": (_prompt([5]), pb.SamplingParams(n=10_000), INVALID, "max_num_seqs"),
    "max_tokens = 0": (_prompt([5]), pb.SamplingParams(max_tokens=0), INVALID, "max_tokens"),
    "max_tokens < 0": (_prompt([5]), pb.SamplingParams(max_tokens=-3), INVALID, "max_tokens"),
    "temperature < 0": (_prompt([5]), pb.SamplingParams(temperature=-0.5), INVALID, "temperature"),
    "top_p = 0": (_prompt([5]), pb.SamplingParams(top_p=0.0), INVALID, "top_p"),
    "top_p > 1": (_prompt([5]), pb.SamplingParams(top_p=1.5), INVALID, "top_p"),
    "prompt over the context": (_prompt([5] * 512), pb.SamplingParams(), INVALID, "max_model_len"),
    "text without tokenizer": (pb.Prompt(text="hello"), pb.SamplingParams(), INVALID, "tokenizer"),
    "chat without tokenizer": (_chat("hello"), pb.SamplingParams(), INVALID, "tokenizer"),
    "oversized message": (
        _prompt([5] * 1_200_000),
        pb.SamplingParams(),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "larger than max",
    ),
}


@pytest.fixture(scope="module")
def server():
    with serving(make_engine(), max_message_bytes=2**20) as running:
        yield running


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gets_status_and_field_and_server_keeps_serving(server, case: str) -> None:
    prompt, params, code, field = CASES[case]
    refused = _refusal(server, pb.GenerateRequest(prompts=[prompt], params=params))
    assert refused[0] == code and field in refused[1]
    with RolloutClient(server.address) as client:
        out = client.generate([[5, 6]], SamplingParams(max_tokens=2, temperature=0.0), timeout=10)
    assert len(out[0].outputs[0].token_ids) == 2
    assert server.loop.stats()["num_requests_unfinished"] == 0


def test_no_prompts_is_invalid(server) -> None:
    with RolloutClient(server.address) as client, pytest.raises(grpc.RpcError) as info:
        client.stubs[server.address].GenerateBatch(pb.GenerateBatchRequest(), timeout=10)
    assert info.value.code() == INVALID and "prompts" in info.value.details()


def test_reusing_a_request_id_for_another_prompt_is_already_exists(server) -> None:
    params = pb.SamplingParams(max_tokens=2)
    with RolloutClient(server.address) as client:
        list(
            client.stubs[server.address].Generate(
                pb.GenerateRequest(request_id="dup", prompts=[_prompt([5, 6])], params=params), timeout=10
            )
        )
    code, details = _refusal(
        server, pb.GenerateRequest(request_id="dup", prompts=[_prompt([7, 8])], params=params)
    )
    assert code == grpc.StatusCode.ALREADY_EXISTS and "request_id 'dup-0'" in details


def test_chat_without_a_chat_template_is_failed_precondition() -> None:
    with serving(make_engine(tokenizer=char_tokenizer())) as server:
        code, details = _refusal(server, pb.GenerateRequest(prompts=[_prompt([5]), _chat("hi")]))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "prompts[1]" in details and "chat template" in details
        with RolloutClient(server.address) as client:  # text prompts still work
            out = client.generate(["abc"], SamplingParams(max_tokens=2, temperature=0.0), timeout=10)
    assert out[0].prompt_token_ids == [3, 4, 5] and len(out[0].outputs[0].token_ids) == 2


def test_full_admission_queue_is_resource_exhausted_and_queued_requests_still_run() -> None:
    with serving(loop_kwargs=dict(max_pending_requests=1)) as server, ThreadPoolExecutor(2) as pool:
        started, release = threading.Event(), threading.Event()
        # the loop thread runs this job, so the request submitted next stays queued until release
        blocker = pool.submit(server.loop.run_exclusive, lambda e: started.set() or release.wait(30))
        assert started.wait(30)
        with RolloutClient(server.address) as client:
            try:
                queued = pool.submit(client.generate, [[5, 6]], SamplingParams(max_tokens=2), timeout=30)
                wait_for(lambda: server.loop.stats()["num_requests_queued"] == 1, what="1 queued request")
                code, details = _refusal(server, pb.GenerateRequest(prompts=[_prompt([7])]))
            finally:
                release.set()
            assert len(queued.result(timeout=30)[0].outputs[0].token_ids) == 2
        blocker.result(timeout=30)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "admission queue full" in details
    assert server.loop.counters["rejected_full"] == 1


def test_engine_step_error_is_internal_and_the_server_keeps_serving() -> None:
    engine = make_engine()
    real_step, failures = engine.step, iter([RuntimeError("kernel exploded")])

    def failing_step() -> list:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real_step()

    engine.step = failing_step
    with serving(engine) as server:
        code, details = _refusal(server, pb.GenerateRequest(prompts=[_prompt([5, 6])]))
        assert code == grpc.StatusCode.INTERNAL and "engine step failed" in details
        assert "kernel exploded" in details
        with RolloutClient(server.address) as client:
            out = client.generate([[5, 6]], SamplingParams(max_tokens=2, temperature=0.0), timeout=10)
        stats = server.loop.call(lambda e: e.stats())
    assert len(out[0].outputs[0].token_ids) == 2
    assert server.loop.counters["failed"] == 1
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


def test_missing_or_wrong_token_is_unauthenticated_when_auth_is_on() -> None:
    with serving(token="s3cret") as server:
        for token in (None, "wrong"):
            with (
                RolloutClient(server.address, token=token, max_retries=0) as client,
                pytest.raises(grpc.RpcError) as info,
            ):
                client.generate([[5]], SamplingParams(max_tokens=1))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "token" in info.value.details()
        with RolloutClient(server.address, token="s3cret") as client:
            client.wait_until_ready(timeout=10)  # health stays open
            assert len(client.generate([[5]], SamplingParams(max_tokens=1))[0].outputs) == 1


def test_paused_server_answers_unavailable() -> None:
    with serving() as server, RolloutClient(server.address, max_retries=0) as client:
        client.pause()
        with pytest.raises(grpc.RpcError) as info:
            client.generate([[5]], SamplingParams(max_tokens=1))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "paused" in info.value.details()
        client.resume()
        assert len(client.generate([[5]], SamplingParams(max_tokens=1))) == 1
