"""`rollout serve` as a real process: SIGTERM drains what is running, refuses new work, exits 0; a
SIGKILLed server's share of every concurrent call goes to the live one."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.outputs import RequestOutput
from tests.serve_process import announced_address, log_tail, start_serve, stop_server


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


def test_sigkill_of_one_server_fails_over_every_concurrent_call(tmp_path: Path) -> None:
    """Six threads share a client of A and B; A dies mid-call. The first call to give up on A used to
    re-route alone: the others saw one live server and raised UNAVAILABLE."""
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    servers = [start_serve(["--port", "0"], log) for log in logs]
    try:
        a, b = (announced_address(server, log) for server, log in zip(servers, logs, strict=True))
        client = RolloutClient([a, b], timeout=300, max_retries=2)
        client.wait_until_ready(120)
        client.balancer.assign([1, 10**9])  # b holds 10**9 tokens: every call puts its prompts on a
        params = SamplingParams(n=8, max_tokens=48, temperature=0.0, ignore_eos=True)
        prompts = [[1, 5 + i, 14, 6, 15] for i in range(4)]
        with ThreadPoolExecutor(6) as pool:
            calls = [pool.submit(client.generate, prompts, params, f"call{k}") for k in range(6)]
            _wait_until_running(client, a, requests=24)
            servers[0].kill()
            outputs = [[o.outputs for o in call.result(timeout=300)] for call in calls]
        assert list(client.dead_servers) == [a]
        again = [o.outputs for o in client.generate(prompts, params, "after")]
    finally:
        for server in servers:
            stop_server(server)
    assert all(out == again for out in outputs)  # greedy: every call equals a call served by b alone
    assert {len(s.token_ids) for out in outputs for samples in out for s in samples} == {48}


def _wait_until_running(
    client: RolloutClient, address: str | None = None, requests: int = 1, timeout: float = 60.0
) -> None:
    """Until the server has accepted `requests` requests and generated a token."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = client.metrics(address)
        if "rollout_generated_tokens_total 0" not in text and _counter(text, "requests_total") >= requests:
            return
        time.sleep(0.01)
    raise AssertionError("generation never started")


def _counter(prometheus_text: str, name: str) -> float:
    for line in prometheus_text.splitlines():
        if line.startswith(f"rollout_{name} "):
            return float(line.split()[-1])
    raise AssertionError(f"no rollout_{name} in the metrics")
