"""EngineLoop: one thread owns the engine; submit, attach, abort, exclusive jobs, failures, drain."""

from __future__ import annotations

import threading

import pytest

from rollout import SamplingParams
from rollout.server.engine_loop import EngineLoop
from rollout.server.handle import Submission
from rollout.server.loop_errors import (
    EngineStepError,
    NotAcceptingError,
    QueueFullError,
    RequestConflictError,
)
from tests.server.server_builders import make_engine, slow_steps, wait_for

GREEDY = SamplingParams(n=2, max_tokens=6, temperature=0.0)


def make_loop(**kwargs: object) -> EngineLoop:
    return EngineLoop(make_engine(), **kwargs).start()


def sub(request_id: str, prompt: list[int] | None = None, params: SamplingParams = GREEDY) -> Submission:
    return Submission(request_id, prompt or [5, 6, 7, 8], params)


def test_submit_returns_every_sample_in_index_order() -> None:
    with make_loop() as loop:
        (out,) = loop.submit([sub("a")]).result(timeout=30)
    assert [c.index for c in out.outputs] == [0, 1]
    assert all(len(c.token_ids) == 6 and c.finish_reason == "length" for c in out.outputs)


def test_retry_with_the_same_id_replays_the_cached_result_without_generating() -> None:
    with make_loop() as loop:
        first = loop.submit([sub("a")]).result(timeout=30)
        generated = loop.call(lambda e: e.stats()["num_generated_tokens"])
        again = loop.submit([sub("a")]).result(timeout=30)
        assert loop.call(lambda e: e.stats()["num_generated_tokens"]) == generated
    assert again == first


def test_retry_attaches_to_the_running_request() -> None:
    with make_loop() as loop:
        release = threading.Event()
        blocker = threading.Thread(target=loop.run_exclusive, args=(lambda e: release.wait(30),))
        blocker.start()
        first, second = loop.submit([sub("a")]), loop.submit([sub("a")])  # both queued behind the job
        release.set()
        blocker.join()
        assert first.result(timeout=30) == second.result(timeout=30)
        assert loop.counters["accepted"] == 1


def test_reusing_an_id_for_another_prompt_is_a_conflict() -> None:
    with make_loop() as loop:
        loop.submit([sub("a")]).result(timeout=30)
        with pytest.raises(RequestConflictError, match="request_id"):
            loop.submit([sub("a", prompt=[9, 9])])


def test_full_admission_queue_is_refused_and_nothing_is_queued() -> None:
    with make_loop(max_pending_requests=2) as loop:
        release = threading.Event()
        blocker = threading.Thread(target=loop.run_exclusive, args=(lambda e: release.wait(30),))
        blocker.start()
        queued = loop.submit([sub("a"), sub("b")])
        with pytest.raises(QueueFullError):
            loop.submit([sub("c")])
        release.set()
        blocker.join()
        assert len(queued.result(timeout=30)) == 2


def test_run_exclusive_waits_for_running_requests_and_new_ones_queue() -> None:
    with make_loop() as loop:
        running = loop.submit(
            [sub("a", params=SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True))]
        )
        seen = loop.run_exclusive(lambda e: (e.num_unfinished_requests, e.stats()["num_blocks_free"]))
        assert seen == (0, 256)
        (out,) = running.result(timeout=30)
        assert out.outputs[0].finish_reason == "length"


def test_run_exclusive_with_abort_running_aborts_and_returns_fn_result() -> None:
    engine = make_engine()
    slow_steps(engine)  # 400 steps take over 4 s: only the abort can end the request sooner
    with EngineLoop(engine).start() as loop:
        running = loop.submit([sub("a", params=SamplingParams(n=3, max_tokens=400, ignore_eos=True))])
        # an exclusive job stops admission, so the request must be in the engine before it is asked
        wait_for(lambda: loop.stats()["num_running_seqs"] == 3, what="3 running samples")
        assert loop.run_exclusive(lambda e: e.num_unfinished_requests, abort_running=True, timeout=30) == 0
        (out,) = running.result(timeout=30)
    assert [c.finish_reason for c in out.outputs] == ["abort"] * 3
    assert all(len(c.token_ids) < 400 for c in out.outputs)


def test_run_exclusive_reraises_the_exception_of_fn() -> None:
    with make_loop() as loop:
        with pytest.raises(KeyError, match="boom"):
            loop.run_exclusive(lambda e: {}["boom"])
        assert len(loop.submit([sub("a")]).result(timeout=30)[0].outputs) == 2


def test_engine_error_fails_the_step_requests_not_the_loop() -> None:
    with make_loop() as loop:
        real_step = loop.engine.step
        calls = iter([True])

        def failing_step():
            if next(calls, False):
                raise RuntimeError("kernel exploded")
            return real_step()

        loop.engine.step = failing_step
        with pytest.raises(EngineStepError, match="kernel exploded"):
            loop.submit([sub("a")]).result(timeout=30)
        assert len(loop.submit([sub("b")]).result(timeout=30)[0].outputs) == 2
        assert loop.call(lambda e: e.stats()["num_blocks_free"]) == 256


def test_cancelled_handle_aborts_its_request_and_frees_blocks() -> None:
    with make_loop() as loop:
        handle = loop.submit([sub("a", params=SamplingParams(n=4, max_tokens=400, ignore_eos=True))])
        handle.cancel()
        assert loop.run_exclusive(lambda e: e.stats()["num_blocks_free"]) == 256
        assert loop.stats()["num_requests_unfinished"] == 0


def test_paused_loop_refuses_new_requests_until_resumed() -> None:
    with make_loop() as loop:
        loop.pause()
        with pytest.raises(NotAcceptingError, match="paused"):
            loop.submit([sub("a")])
        loop.resume()
        assert len(loop.submit([sub("a")]).result(timeout=30)) == 1


def test_stop_drains_running_requests_within_the_grace_period() -> None:
    loop = make_loop()
    handle = loop.submit([sub("a")])
    loop.stop(grace=30)
    (out,) = handle.result(timeout=1)
    assert {c.finish_reason for c in out.outputs} == {"length"}
    with pytest.raises(NotAcceptingError):
        loop.submit([sub("b")])
