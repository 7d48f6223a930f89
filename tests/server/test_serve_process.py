"""`rollout serve` as a real process: SIGTERM drains what is running, refuses new work, exits 0."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.outputs import RequestOutput
from tests.serve_process import announced_address, log_tail, start_serve


def test_sigterm_finishes_running_requests_then_exits_cleanly(tmp_path: Path) -> None:
    log_path = tmp_path / "serve.log"
    server = start_serve(["--port", "0", "--grace", "60"], log_path)
    try:
        client = RolloutClient(announced_address(server, log_path), timeout=120, max_retries=0)
        client.wait_until_ready(120)
        params = SamplingParams(n=8, max_tokens=48, temperature=1.0, ignore_eos=True, logprobs=0)
        prompts = [[1, 5 + i % 10, 14, 6, 15] for i in range(64)]  # "<bos>d+2=": 512 samples of 48 tokens
        results: list[list[RequestOutput]] = []
        worker = threading.Thread(target=lambda: results.append(client.generate(prompts, params)))
        worker.start()
        _wait_until_running(client)
        assert worker.is_alive()  # the signal lands mid-generation
        server.send_signal(signal.SIGTERM)
        worker.join(120)
        assert server.wait(60) == 0, log_tail(log_path)
    finally:
        if server.poll() is None:
            server.kill()
    (outputs,) = results  # the in-flight call was drained, not cut off
    samples = [s for o in outputs for s in o.outputs]
    assert len(samples) == 64 * 8
    assert {s.finish_reason for s in samples} == {"length"} and {len(s.token_ids) for s in samples} == {48}
    try:
        client.generate([[1, 5, 15]], SamplingParams(max_tokens=2))
        raise AssertionError("a stopped server answered")
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE


def _wait_until_running(client: RolloutClient, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "rollout_generated_tokens_total 0" not in client.metrics():
            return
        time.sleep(0.01)
    raise AssertionError("generation never started")
