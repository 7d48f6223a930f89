"""`rollout serve --tensor-parallel-size 2` as a real process: gRPC generate, a weight push, adapter pushes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rollout import SamplingParams
from rollout.client import RolloutClient
from rollout.client.weight_push import WeightSyncError
from tests.builders import random_prompts
from tests.distributed.test_tensor_parallel import assert_same_outputs, saved_updated
from tests.distributed.tp_builders import one_llm, perturbed_state, saved_model
from tests.serve_process import announced_address, log_tail, start_serve
from tests.weights.lora_builders import assert_same_outputs as assert_same_greedy
from tests.weights.lora_builders import merged_reference, outputs, peft_policy, set_adapter


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
        assert server.wait(300) == 0, log_tail(log_path)  # the workers were released, not left waiting
    finally:
        if server.poll() is None:
            server.kill()


def test_a_tensor_parallel_server_takes_adapter_pushes_and_knows_their_retries(tmp_path: Path) -> None:
    """Over gRPC: an adapter push serves what one device serves after the merged push; the same push
    again at its version is recognised (rank 0's merged shards equal the serving ones), another
    adapter at that version is refused."""
    path = saved_model(tmp_path / "llama", "llama", seed=0)
    log_path = tmp_path / "serve.log"
    args = ["--port", "0", "--model", str(path), "--tensor-parallel-size", "2", "--num-blocks", "128"]
    server = start_serve(args, log_path)
    policy = peft_policy(base_seed=0, adapter_seed=1)
    try:
        client = RolloutClient(announced_address(server, log_path), timeout=120)
        assert client.update_weights(policy, version=5) == 5
        assert client.update_weights(policy, version=5) == 5  # a retry: nothing written again
        with pytest.raises(WeightSyncError, match="INVALID_ARGUMENT"):
            client.update_weights(set_adapter(policy, 2), version=5)
        assert_same_greedy(outputs(client), merged_reference(set_adapter(policy, 1)))
        server.send_signal(signal.SIGTERM)
        assert server.wait(300) == 0, log_tail(log_path)
    finally:
        if server.poll() is None:
            server.kill()
