"""Many in-flight updates, every policy, under concurrent clients: every request is answered with n
samples, every sampled token comes back exactly once, spans are well formed, no block leaks."""

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rollout import SamplingParams
from rollout.outputs import RequestOutput
from tests.builders import random_prompts, tiny_model
from tests.server.server_builders import client_for, wait_for
from tests.weights.server_builders import weight_server

TIMEOUT_S = 300.0  # a hang guard
NUM_UPDATES = 120
POLICIES = ("keep", "recompute", "abort", "wait")
PROMPTS = random_prompts(4, 5, 30, seed=11)


def per_token_versions(spans: list[tuple[int, int]], num_tokens: int) -> list[int]:
    bounds = [first for first, _ in spans[1:]] + [num_tokens]
    return [version for (first, version), end in zip(spans, bounds, strict=True) for _ in range(first, end)]


def check_sample_accounting(out: RequestOutput, params: SamplingParams, last_version: int) -> None:
    assert sorted(s.index for s in out.outputs) == list(range(params.n))
    for sample in out.outputs:
        num = len(sample.token_ids)
        assert len(sample.token_logprobs) == num
        if sample.finish_reason == "length":
            assert num == params.max_tokens
        else:
            assert sample.finish_reason == "abort" and num < params.max_tokens
        firsts = [first for first, _ in sample.weight_versions]
        versions = [version for _, version in sample.weight_versions]
        assert firsts == sorted(set(firsts)) and (num == 0 or firsts[0] == 0) and all(f < num for f in firsts)
        assert versions == sorted(versions) and all(0 <= v <= last_version for v in versions)
        per_token = zip(
            per_token_versions(sample.kv_versions, num),
            per_token_versions(sample.weight_versions, num),
            strict=True,
        )
        assert all(kv <= sampled for kv, sampled in per_token)
        assert len(per_token_versions(sample.kv_versions, num)) == num
        assert sample.weight_version == min(versions, default=sample.weight_version)


@pytest.mark.slow
def test_hundreds_of_updates_with_every_policy_lose_no_token_and_leak_no_block() -> None:
    states = [tiny_model(seed=s).state_dict() for s in range(3)]
    results: list[tuple[RequestOutput, SamplingParams]] = []
    lock, done = threading.Lock(), threading.Event()
    with weight_server(seed=0, max_model_len=256, num_blocks=96, max_num_seqs=16) as server:

        def generate(worker: int) -> None:
            with client_for(server) as client:
                for round_ in itertools.count():
                    if done.is_set():
                        return
                    params = SamplingParams(
                        n=1 + (worker + round_) % 3,
                        max_tokens=20 + 7 * worker,
                        temperature=1.0,
                        seed=round_,
                        logprobs=0,
                        ignore_eos=True,
                    )
                    outs = client.generate(PROMPTS, params, timeout=TIMEOUT_S)
                    with lock:
                        results.extend((o, params) for o in outs)

        with client_for(server) as trainer, ThreadPoolExecutor(3) as pool:
            workers = [pool.submit(generate, w) for w in range(3)]
            try:
                for i in range(NUM_UPDATES):
                    policy = POLICIES[i % len(POLICIES)]
                    assert (
                        trainer.update_weights(states[i % 3], in_flight=policy, timeout_s=TIMEOUT_S) == i + 1
                    )
            finally:
                done.set()
            for worker in workers:
                worker.result(timeout=TIMEOUT_S)
        wait_for(lambda: server.loop.stats()["num_requests_unfinished"] == 0, TIMEOUT_S, "idle")
        stats = server.loop.stats()
    for out, params in results:
        check_sample_accounting(out, params, NUM_UPDATES)
    returned = sum(len(s.token_ids) for out, _ in results for s in out.outputs)
    assert returned == stats["num_generated_tokens"]
    assert stats["num_blocks_free"] == stats["num_blocks_total"]
    assert stats["in_flight_tokens_kept"] > 0 and stats["in_flight_tokens_recomputed"] > 0
    assert stats["in_flight_tokens_returned_partial"] > 0
    assert any(len(s.weight_versions) > 1 for out, _ in results for s in out.outputs)
