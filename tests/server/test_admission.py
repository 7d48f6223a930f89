"""One caller cannot starve or fail another: the fair admission bound (rollout/server/admission.py), its
refusals (RESOURCE_EXHAUSTED with a retry-after hint) and the client's retries, on a real gRPC server."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

import rollout.server.servicer
from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.server.admission import FairLimit, OverShareError, ServerFullError
from rollout.server.app import DEFAULT_MAX_GENERATE_CALLS
from rollout.server.engine_loop import EngineLoop
from rollout.server.handle import Submission
from tests.builders import char_tokenizer
from tests.server.server_builders import client_for, make_engine, serving, slow_steps, wait_for
from tests.server.test_open_calls import open_streams

SHORT = SamplingParams(max_tokens=2, temperature=0.0)
HOG = pb.SamplingParams(n=1, max_tokens=60, ignore_eos=True)


def test_a_lone_caller_gets_the_capacity_less_the_reserve_and_a_newcomer_gets_in_at_once() -> None:
    limit = FairLimit(16, "open calls", "--flag")
    for _ in range(14):  # 16 less a reserve of 16 // 8
        limit.acquire("hog")
    with pytest.raises(OverShareError, match="holds 14 of 14 open calls"):
        limit.acquire("hog")
    limit.acquire("new")
    limit.acquire("new")  # under its share (7 of the 14 between two callers): the reserve is for it
    with pytest.raises(ServerFullError, match="16 open calls: the server's limit"):
        limit.acquire("third")
    limit.release("hog")  # 13 of 15: over its share of 7 (two callers) and in the reserve
    with pytest.raises(OverShareError):
        limit.acquire("hog")
    limit.acquire("third")  # the slot the hog gave back goes to a caller with none


def test_a_caller_over_its_share_is_admitted_while_the_total_stays_out_of_the_reserve() -> None:
    limit = FairLimit(16, "open calls", "--flag")
    limit.acquire("a")
    for _ in range(13):  # past its share of 7 (two callers), while 14 of 16 leaves the reserve free
        limit.acquire("b")
    with pytest.raises(OverShareError):
        limit.acquire("b")
    assert limit.held("b") == 13 and limit.total == 14


def test_an_unrelated_callers_calls_all_succeed_while_one_caller_holds_every_call_it_may() -> None:
    """One caller holding the server's 256 calls made 8 of another caller's 17 concurrent requests fail."""
    engine = make_engine(max_num_seqs=256, num_blocks=1024)
    slow_steps(engine, delay=0.2)  # the hog's 60-token streams stay open for 12 s at least
    hog_share = DEFAULT_MAX_GENERATE_CALLS - DEFAULT_MAX_GENERATE_CALLS // 8
    with (
        serving(engine, loop_kwargs={"max_pending_requests": 512}) as server,
        client_for(server, timeout=120, max_retries=0) as hog,
        client_for(server, timeout=120, max_retries=0) as other,
        open_streams(hog.channels[server.address], DEFAULT_MAX_GENERATE_CALLS, HOG) as calls,
    ):
        wait_for(lambda: server.loop.counters["accepted"] == hog_share, what="the hog's calls")
        wait_for(lambda: sum(c.done() for c in calls) == DEFAULT_MAX_GENERATE_CALLS - hog_share)
        refused = [c for c in calls if c.done()]
        assert {c.code() for c in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "its share" in refused[0].details()
        assert ("retry-after", "1") in tuple(refused[0].trailing_metadata())
        with ThreadPoolExecutor(17) as pool:
            results = list(pool.map(lambda i: other.generate([[5, 6, i]], SHORT), range(17)))
        assert not any(c.done() for c in calls if c not in refused)  # the hog's calls still open
    assert all(len(r[0].outputs[0].token_ids) == 2 for r in results)


def test_the_client_retries_a_refusal_with_a_retry_after_hint_until_a_slot_frees() -> None:
    engine = make_engine()
    slow_steps(engine, delay=0.05)
    with (
        serving(engine, max_generate_calls=2) as server,
        client_for(server, timeout=120, max_retries=0) as hog,
        client_for(server, timeout=120, max_retries=0) as impatient,
        client_for(server, timeout=120, max_retries=8) as patient,
        open_streams(hog.channels[server.address], 2) as held,
    ):
        wait_for(lambda: server.loop.counters["accepted"] == 2, what="the two calls")
        with pytest.raises(grpc.RpcError) as info:
            impatient.generate([[5, 6, 7]], SHORT)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        threading.Timer(1.0, held[0].cancel).start()
        started = time.monotonic()
        out = patient.generate([[5, 6, 7]], SHORT)
    assert len(out[0].outputs[0].token_ids) == 2 and time.monotonic() - started >= 1.0


def test_unfinished_requests_are_shared_by_callers_too() -> None:
    """One caller's queued prompts cannot fill the admission queue: the reserve stays for others."""
    loop = EngineLoop(make_engine(), max_pending_requests=16).start()
    release = threading.Event()
    blocker = threading.Thread(target=loop.run_exclusive, args=(lambda e: release.wait(30),))
    blocker.start()
    try:
        hog = loop.submit([_sub(f"a{i}", "a") for i in range(14)])
        with pytest.raises(OverShareError, match="holds 14 of 14 unfinished requests"):
            loop.submit([_sub("a14", "a")])
        other = loop.submit([_sub("b0", "b"), _sub("b1", "b")])
        with pytest.raises(ServerFullError, match="admission queue full"):
            loop.submit([_sub("c0", "c")])
    finally:
        release.set()
        blocker.join()
    assert len(hog.result(timeout=60)) == 14 and len(other.result(timeout=60)) == 2
    loop.submit([_sub("a15", "a")]).result(timeout=60)  # finished requests give their share back
    loop.stop(grace=0.0)


def test_calls_sharing_a_caller_name_share_one_share() -> None:
    engine = make_engine(max_num_seqs=16)
    slow_steps(engine, delay=0.05)
    with (
        serving(engine, max_generate_calls=8) as server,
        RolloutClient(server.address, caller="trainer", max_retries=0) as first,
        RolloutClient(server.address, caller="trainer", max_retries=0) as second,
    ):
        stream = first.stubs[server.address].Generate
        prompt = pb.Prompt(token_ids=pb.TokenIds(ids=[5, 6, 7]))
        params = pb.SamplingParams(max_tokens=400, ignore_eos=True)
        calls = [
            stream(pb.GenerateRequest(prompts=[prompt], params=params), metadata=first.metadata)
            for _ in range(7)
        ]
        try:
            wait_for(lambda: server.loop.counters["accepted"] == 7, what="the first client's 7 calls")
            with pytest.raises(grpc.RpcError) as info:
                second.generate([[5, 6, 7]], SHORT)
            assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            for call in calls:
                call.cancel()


def _sub(request_id: str, caller: str) -> Submission:
    return Submission(request_id, [5, 6, 7], SHORT, caller=caller)


def test_a_call_with_more_prompts_than_admitted_is_refused_before_any_is_tokenized(monkeypatch) -> None:
    tokenized: list[str] = []
    real = rollout.server.servicer.tokenize_text
    monkeypatch.setattr(
        rollout.server.servicer, "tokenize_text", lambda *a, **k: tokenized.append(a[1]) or real(*a, **k)
    )
    engine = make_engine(tokenizer=char_tokenizer())
    with (
        serving(engine, loop_kwargs={"max_pending_requests": 16}) as server,
        client_for(server, max_retries=0) as client,
    ):
        with pytest.raises(grpc.RpcError) as info:
            client.generate(["abc"] * 17, SHORT)
        assert len(client.generate(["abc"] * 2, SHORT)) == 2
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "prompts: the call has 17 new prompts, more than the server admits at once "
        "(max_pending_requests 16); split it into smaller calls"
    )
    assert tokenized == ["abc", "abc"]
