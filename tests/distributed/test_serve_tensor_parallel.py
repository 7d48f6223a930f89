"""`rollout serve --tensor-parallel-size 2` as a real process: gRPC generate and a weight push."""

from __future__ import annotations

import signal
from pathlib import Path

from rollout import SamplingParams
from rollout.client import RolloutClient
from tests.builders import random_prompts
from tests.distributed.test_tensor_parallel import assert_same_outputs, saved_updated
from tests.distributed.tp_builders import one_llm, perturbed_state, saved_model
from tests.serve_process import announced_address, log_tail, start_serve


def test_a_tensor_parallel_server_generates_and_takes_a_push(tmp_path: Path) -> None:
    path = saved_model(tmp_path / "llama", "llama")
    log_path = tmp_path / "serve.log"
    args = ["--port", "0", "--model", str(path), "--tensor-parallel-size", "2", "--num-blocks", "128"]
    server = start_serve(args, log_path)
    prompts = random_prompts(3, 5, 20, seed=6)
    params = SamplingParams(n=2, max_tokens=10, temperature=1.0, seed=3, logprobs=0)
    try:
        client = RolloutClient(announced_address(server, log_path), timeout=120)
        assert_same_outputs(client.generate(prompts, params), one_llm(path).generate(prompts, params))
        new = perturbed_state(path)
        assert client.update_weights(new, transport="grpc") == 1
        fresh = one_llm(saved_updated(path, new, tmp_path / "updated"))
        assert_same_outputs(client.generate(prompts, params), fresh.generate(prompts, params))
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0, log_tail(log_path)  # the workers were released, not left waiting
    finally:
        if server.poll() is None:
            server.kill()
