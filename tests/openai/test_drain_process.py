"""SIGTERM under load on a `rollout serve` process with both front ends: it exits within `--grace`, the
running streams end whole (their samples "length" or "abort"), and requests that arrive during the
drain get 503 / UNAVAILABLE at once, none cut mid-answer.

Before: with `--grace 10` it exited after 25 s, and 14 requests sent during the drain were cut (ReadError).
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from tests.builders import char_tokenizer, tiny_model
from tests.openai.test_serve_openai import openai_base_url
from tests.serve_process import announced_address, log_tail, start_serve

GRACE_S = 4.0
STREAMS = 200
STREAM = {"prompt": "abc", "max_tokens": 500, "ignore_eos": True, "stream": True}


@pytest.mark.slow
def test_sigterm_under_load_exits_within_the_grace_and_answers_new_requests_503(tmp_path: Path) -> None:
    tiny_model(seed=0).save_pretrained(tmp_path / "model")
    char_tokenizer().save_pretrained(tmp_path / "model")
    log = tmp_path / "serve.log"
    args = ["--port", "0", "--openai-port", "0", "--model", str(tmp_path / "model"), "--grace", str(GRACE_S)]
    server = start_serve(args, log)
    try:
        address, base_url = announced_address(server, log), openai_base_url(log)
        finishes: list[str] = []
        streams = [
            threading.Thread(target=_stream, args=(base_url, f"agent-{i}", str(tmp_path / "model"), finishes))
            for i in range(STREAMS)
        ]
        for thread in streams:
            thread.start()
        _wait_until_generating(address, STREAMS)
        server.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        during = _requests_until_exit(server, address, base_url, str(tmp_path / "model"))
        outside_s = time.monotonic() - signalled
        for thread in streams:
            thread.join(60)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0, log_tail(log)
    stopped_s = float(re.search(r"stopped in ([0-9.]+) s", log.read_text()).group(1))
    assert stopped_s <= GRACE_S, log_tail(log)
    assert outside_s < GRACE_S + 10, outside_s  # a hang guard: the exit itself is immediate
    assert len(finishes) == STREAMS and set(finishes) <= {"length", "abort"}, finishes[:5]
    assert "abort" in finishes  # the grace ended while they ran: aborted, and the streams still ended whole
    early = [outcome for sent_at, outcome in during if sent_at < GRACE_S / 2]
    assert early and set(early) <= {"http 503", "grpc UNAVAILABLE"}, early
    assert all(o in ("http 503", "grpc UNAVAILABLE", "http refused") for _, o in during), during


def _stream(base_url: str, caller: str, model: str, finishes: list[str]) -> None:
    """One long completion stream; appends its finish reason once it ended with [DONE]."""
    body = {"model": model, **STREAM}
    reason = None
    with httpx.stream(
        "POST", f"{base_url}/completions", json=body, headers={"x-rollout-caller": caller}, timeout=120
    ) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line == "data: [DONE]":
                finishes.append(reason)
                return
            if line.startswith("data: "):
                reason = json.loads(line[6:])["choices"][0].get("finish_reason") or reason


def _wait_until_generating(address: str, streams: int) -> None:
    with RolloutClient(address, timeout=30) as client:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            running = [
                line
                for line in client.metrics().splitlines()
                if line.startswith("rollout_sequences_running ")
            ]
            if running and float(running[0].split()[-1]) >= streams:
                return
            time.sleep(0.05)
    raise AssertionError("the streams never ran together")


def _requests_until_exit(server, address: str, base_url: str, model: str) -> list[tuple[float, str]]:
    """Sends a short HTTP and a short gRPC request every 0.1 s until the server exits."""
    started, outcomes = time.monotonic(), []
    client = RolloutClient(address, timeout=10, max_retries=0)
    while server.poll() is None:
        sent_at = time.monotonic() - started
        try:
            reply = httpx.post(
                f"{base_url}/completions", json={"model": model, "prompt": "ab", "max_tokens": 2}
            )
            outcomes.append((sent_at, f"http {reply.status_code}"))
        except httpx.ConnectError:
            outcomes.append((sent_at, "http refused"))  # the port closed: the process is leaving
        try:
            client.generate([[5, 6, 7]], SamplingParams(max_tokens=2))
            outcomes.append((sent_at, "grpc OK"))
        except grpc.RpcError as exc:
            outcomes.append((sent_at, f"grpc {exc.code().name}"))
        time.sleep(0.1)
    return outcomes
