"""Generation running while updates land: no sample mixes versions, each says which it used."""

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from rollout import SamplingParams
from rollout.outputs import RequestOutput
from tests.builders import tiny_model
from tests.server.server_builders import client_for, slow_steps, wait_for
from tests.weights.server_builders import GREEDY, PROMPTS, reference_tokens, weight_server

SEEDS = (0, 1, 2, 3)  # version v serves the model of seed SEEDS[v]
TIMEOUT_S = 120.0  # every wait fails the test after this long instead of hanging the suite


def test_every_sample_is_entirely_one_version_and_says_which() -> None:
    references = {version: reference_tokens(seed) for version, seed in enumerate(SEEDS)}
    outputs: list[RequestOutput] = []
    done = threading.Event()
    with weight_server(seed=0) as server, client_for(server) as client, ThreadPoolExecutor(2) as pool:

        def generate_until_done() -> None:
            while not done.is_set():
                outputs.extend(client.generate(PROMPTS, GREEDY, timeout=TIMEOUT_S))

        def produced(version: int, workers: list[Future]) -> bool:
            """True once an output of `version` is in; also once a worker died, to raise its error."""
            return any(o.outputs[0].weight_version == version for o in outputs) or any(
                w.done() for w in workers
            )

        workers = [pool.submit(generate_until_done) for _ in range(2)]
        try:
            # outputs of the first and the last version, so updates did land between generations
            wait_for(lambda: produced(0, workers), TIMEOUT_S, "an output of version 0")
            for version, seed in enumerate(SEEDS[1:], start=1):
                pushed = client.update_weights(tiny_model(seed=seed), transport="grpc", timeout_s=TIMEOUT_S)
                assert pushed == version
            wait_for(lambda: produced(len(SEEDS) - 1, workers), TIMEOUT_S, "an output of the last version")
        finally:
            done.set()
        for worker in workers:
            worker.result(timeout=TIMEOUT_S)
    versions = set()
    for out in outputs:
        sample = out.outputs[0]
        prompt_index = PROMPTS.index(out.prompt_token_ids)
        assert sample.token_ids == references[sample.weight_version][prompt_index]
        versions.add(sample.weight_version)
    assert {0, len(SEEDS) - 1} <= versions


def test_abort_running_ends_running_samples_with_abort_and_commits_at_once() -> None:
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    with weight_server(seed=0, max_model_len=512) as server, client_for(server) as client:
        slow_steps(server.loop.engine)  # 400 steps take over 4 s: only the abort can end it sooner
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(client.generate, PROMPTS[:1], long, timeout=TIMEOUT_S)
            wait_for(lambda: server.loop.stats()["num_generated_tokens"] > 0, TIMEOUT_S, "a generated token")
            pushed = client.update_weights(
                tiny_model(seed=1), transport="grpc", abort_running=True, timeout_s=TIMEOUT_S
            )
            assert pushed == 1
            (result,) = running.result(timeout=TIMEOUT_S)
        sample = result.outputs[0]
        assert sample.finish_reason == "abort" and sample.weight_version == 0
        assert 0 < len(sample.token_ids) < 400
