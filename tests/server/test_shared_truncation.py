"""A trainer that truncates its shared-memory segments while its push waits for in-flight work cannot crash
the server: against a real `rollout serve` process, the push commits the weights it held when it arrived.

Before, the commit copied from a mapping of the segments and the server died of SIGBUS (rc -7, no log).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor, TimeoutError
from pathlib import Path

import grpc
import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.client import RolloutClient
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.shared_wire import this_host, views_to_proto
from rollout.protocol.weights_wire import commit_options
from rollout.weights.manifest import WeightUpdateError
from rollout.weights.segment_read import REFCOUNT_HEADER_BYTES, _read_exactly
from rollout.weights.shared import share_tensors
from tests.builders import char_tokenizer, random_prompts, reference_copy, tiny_model
from tests.serve_process import announced_address, log_tail, start_serve, stop_server
from tests.server.server_builders import client_for
from tests.weights.server_builders import greedy_tokens, reference_tokens, weight_server

pytestmark = pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm (Linux)")

LONG = SamplingParams(n=4, max_tokens=400, temperature=1.0, seed=0, ignore_eos=True)
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
PROMPTS = random_prompts(3, 5, 20, seed=11)


def test_truncating_the_segments_while_the_push_waits_leaves_the_server_serving_the_pushed_weights(
    tmp_path: Path,
) -> None:
    tiny_model(seed=0).save_pretrained(tmp_path / "model")
    char_tokenizer().save_pretrained(tmp_path / "model")
    trainer = tiny_model(seed=1)
    expected = _greedy(LLM(model=reference_copy(trainer), config=EngineConfig(num_blocks=256)))
    log_path = tmp_path / "serve.log"
    server = start_serve(["--port", "0", "--model", str(tmp_path / "model")], log_path)
    try:
        client = RolloutClient(announced_address(server, log_path), timeout=300, max_retries=0)
        client.wait_until_ready(120)
        with ThreadPoolExecutor(16) as pool:
            batch = pool.submit(client.generate, random_prompts(16, 5, 20, seed=3), LONG)
            _wait_for_metric(client, "rollout_sequences_running", lambda v: v > 0)
            push = pool.submit(client.update_weights, trainer, "shared", in_flight="wait")
            _wait_until_the_commit_is_pending(client, pool)
            truncated = _truncate_segments(trainer)
            assert not batch.done() and not push.done(), "the batch ended before the truncation"
            assert push.result(timeout=300) == 1
            batch.result(timeout=300)
        assert server.poll() is None, log_tail(log_path)
        assert truncated == len({p.untyped_storage().data_ptr() for p in trainer.state_dict().values()})
        assert _greedy(client) == expected  # committed exactly: the weights as they were when pushed
    finally:
        stop_server(server)
    assert server.returncode == 0, log_tail(log_path)


def _truncate_segments(model: torch.nn.Module) -> int:
    """Cuts every storage's segment down to torch's header: its bytes are gone (touching them in this
    process would now be a SIGBUS too, so nothing here reads the model again)."""
    names = {t.untyped_storage()._share_filename_cpu_()[1] for t in model.state_dict().values()}
    for name in names:
        os.truncate(Path("/dev/shm") / name.decode()[1:], REFCOUNT_HEADER_BYTES)
    return len(names)


def _greedy(llm_or_client) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm_or_client.generate(PROMPTS, GREEDY)]


def _wait_until_the_commit_is_pending(client: RolloutClient, pool: ThreadPoolExecutor) -> None:
    """A request that fits beside the batch is queued only while an exclusive job (the push's commit,
    in_flight="wait") is pending: then the server has received the push, and the batch still runs."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        probe = pool.submit(client.generate, [[5, 6, 7]], SamplingParams(max_tokens=2))
        try:
            probe.result(timeout=0.5)  # admitted at once: the push has not arrived yet
            continue
        except TimeoutError:
            pass
        if _metric(client, "rollout_requests_waiting") >= 1:
            return
    raise AssertionError("the push's commit was never seen pending")


def _wait_for_metric(client: RolloutClient, name: str, ok, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok(_metric(client, name)):
        assert time.monotonic() < deadline, f"{name} not reached within {timeout} s"
        time.sleep(0.05)


def _metric(client: RolloutClient, name: str) -> float:
    lines = [line for line in client.metrics().splitlines() if line.startswith(name + " ")]
    return float(lines[0].split()[-1])


def test_a_segment_truncated_before_the_push_arrives_is_refused_by_name_and_nothing_changes() -> None:
    trainer = tiny_model(seed=1)
    with weight_server(seed=0) as server, client_for(server) as client:
        views = share_tensors(list(trainer.state_dict().items()))
        _truncate_segments(trainer)
        request = weights_pb2.UpdateWeightsFromSharedRequest(
            tensors=views_to_proto(views), options=commit_options(None, False, "wait", ""), host=this_host()
        )
        stub = weights_pb2_grpc.WeightSyncServiceStub(client.channels[server.address])
        with pytest.raises(grpc.RpcError) as info:
            stub.UpdateWeightsFromShared(request, timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert views[0].spec.name in info.value.details() and "segment" in info.value.details()
        assert server.loop.engine.weight_version == 0
        assert greedy_tokens(client) == reference_tokens(0)


def test_a_read_that_comes_up_short_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    """A segment that shrinks between the size check and the read: read(2) ends early, no SIGBUS."""
    path = tmp_path / "torch_segment"
    path.write_bytes(bytes(100))
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(WeightUpdateError, match="w: segment torch_segment ended at byte 100"):
            _read_exactly(fd, memoryview(bytearray(200)), 0, "w", path)
    finally:
        os.close(fd)
