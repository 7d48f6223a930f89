"""In-flight update policies over gRPC: abort / keep / recompute commit while requests run (no wait for an
idle engine), and the version spans reach the client."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from rollout import SamplingParams
from rollout.client.weight_push import WeightSyncError
from tests.builders import tiny_model
from tests.server.server_builders import client_for, slow_steps, wait_for
from tests.weights.server_builders import PROMPTS, weight_server

TIMEOUT_S = 120.0  # a hang guard
LONG = SamplingParams(temperature=0, max_tokens=150, ignore_eos=True, logprobs=0, n=2)


def update_mid_flight(in_flight: str, params: SamplingParams = LONG):
    """Starts a long request on a slowed server, pushes an update with `in_flight`, returns
    (whether the request was still running when the push returned, its samples, server stats
    plus its Prometheus text under "metrics")."""
    with weight_server(seed=0, max_model_len=512) as server, client_for(server) as client:
        slow_steps(server.loop.engine)  # 150 steps take over 1.5 s
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(client.generate, PROMPTS[:1], params, timeout=TIMEOUT_S)
            wait_for(lambda: server.loop.stats()["num_generated_tokens"] > 0, TIMEOUT_S, "a token")
            pushed = client.update_weights(tiny_model(seed=1), in_flight=in_flight, timeout_s=TIMEOUT_S)
            still_running = not running.done()
            assert pushed == 1
            (result,) = running.result(timeout=TIMEOUT_S)
        wait_for(lambda: server.loop.stats()["num_requests_unfinished"] == 0, TIMEOUT_S, "idle")
        return still_running, result.outputs, {**server.loop.stats(), "metrics": client.metrics()}


@pytest.mark.parametrize("in_flight", ["keep", "recompute"])
def test_keep_and_recompute_commit_mid_flight_and_the_samples_carry_both_versions(in_flight: str) -> None:
    still_running, samples, stats = update_mid_flight(in_flight)
    assert still_running
    for sample in samples:
        assert sample.finish_reason == "length" and len(sample.token_ids) == len(sample.token_logprobs) == 150
        (_, old), (switch, new) = sample.weight_versions
        assert (old, new) == (0, 1) and 0 < switch < 150
        expected_kv = [(0, 0)] if in_flight == "keep" else [(0, 0), (switch, 1)]
        assert sample.kv_versions == expected_kv and sample.weight_version == 0
    action = "kept" if in_flight == "keep" else "recomputed"
    assert stats[f"in_flight_tokens_{action}"] > 0 and stats["num_blocks_free"] == stats["num_blocks_total"]
    assert (
        f'rollout_in_flight_tokens_total{{action="{action}"}} {stats[f"in_flight_tokens_{action}"]}'
        in (stats["metrics"])
    )


def test_abort_returns_the_partial_samples_as_soon_as_the_update_commits() -> None:
    _, samples, stats = update_mid_flight("abort")
    for sample in samples:
        assert (
            sample.finish_reason == "abort" and 0 < len(sample.token_ids) == len(sample.token_logprobs) < 150
        )
        assert sample.weight_versions == sample.kv_versions == [(0, 0)]
    assert stats["in_flight_tokens_returned_partial"] == sum(len(s.token_ids) for s in samples)


def test_max_staleness_reaches_the_engine_through_the_request() -> None:
    _, samples, _ = update_mid_flight("recompute", SamplingParams(**{**LONG.__dict__, "max_staleness": 1}))
    assert all(s.kv_versions == [(0, 0)] and len(s.weight_versions) == 2 for s in samples)


def test_abort_running_with_another_policy_is_refused_and_changes_nothing() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        with pytest.raises(WeightSyncError, match="INVALID_ARGUMENT.*abort_running"):
            client.update_weights(
                tiny_model(seed=1), in_flight="keep", abort_running=True, timeout_s=TIMEOUT_S
            )
        assert client.server_info().weight_version == 0


def test_abort_then_resume_over_grpc_equals_an_uninterrupted_run() -> None:
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True, logprobs=2, n=2)
    with weight_server(seed=0) as server, client_for(server) as client:
        whole = client.generate(PROMPTS[:2], params, timeout=TIMEOUT_S)
        slow_steps(server.loop.engine)
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(client.generate, PROMPTS[:2], params, timeout=TIMEOUT_S)
            wait_for(lambda: server.loop.stats()["num_generated_tokens"] > 240 + 10, TIMEOUT_S, "tokens")
            same = server.loop.engine.model.state_dict()
            client.update_weights(same, in_flight="abort", timeout_s=TIMEOUT_S)
            partial = running.result(timeout=TIMEOUT_S)
        assert all(0 < len(s.token_ids) < 60 for out in partial for s in out.outputs)
        resumed = client.resume_aborted(partial, params, timeout=TIMEOUT_S)
    for got, want in zip(resumed, whole, strict=True):
        for a, b in zip(got.outputs, want.outputs, strict=True):
            assert (a.index, a.token_ids, a.finish_reason) == (b.index, b.token_ids, "length")
            assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-5)
            assert [set(t) for t in a.top_logprobs] == [set(t) for t in b.top_logprobs]
            assert a.weight_versions == [(0, 0), (len(partial_tokens(partial, got, a)), 1)]


def partial_tokens(partial, got, sample):
    """The partial sample that `sample` (of result `got`) continued."""
    out = next(o for o in partial if o.prompt_token_ids == got.prompt_token_ids)
    return next(s for s in out.outputs if s.index == sample.index).token_ids
