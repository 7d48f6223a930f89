"""Generation running while updates land: no sample mixes versions, each says which it used."""

import threading

from rollout import SamplingParams
from rollout.outputs import RequestOutput
from tests.builders import tiny_model
from tests.server.server_builders import client_for
from tests.weights.server_builders import GREEDY, PROMPTS, reference_tokens, weight_server

SEEDS = (0, 1, 2, 3)  # version v serves the model of seed SEEDS[v]


def test_every_sample_is_entirely_one_version_and_says_which() -> None:
    references = {version: reference_tokens(seed) for version, seed in enumerate(SEEDS)}
    outputs: list[RequestOutput] = []
    with weight_server(seed=0) as server, client_for(server) as client:
        done = threading.Event()

        def generate_until_done() -> None:
            while not done.is_set():
                outputs.extend(client.generate(PROMPTS, GREEDY))

        workers = [threading.Thread(target=generate_until_done) for _ in range(2)]
        for worker in workers:
            worker.start()
        for version, seed in enumerate(SEEDS[1:], start=1):
            assert client.update_weights(tiny_model(seed=seed), transport="grpc") == version
        done.set()
        for worker in workers:
            worker.join()
    versions = set()
    for out in outputs:
        sample = out.outputs[0]
        prompt_index = PROMPTS.index(out.prompt_token_ids)
        assert sample.token_ids == references[sample.weight_version][prompt_index]
        versions.add(sample.weight_version)
    assert len(versions) >= 2


def test_abort_running_ends_running_samples_with_abort_and_commits_at_once() -> None:
    long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    with weight_server(seed=0, max_model_len=512) as server, client_for(server) as client:
        results: list[RequestOutput] = []
        worker = threading.Thread(target=lambda: results.extend(client.generate(PROMPTS[:1], long)))
        worker.start()
        while server.loop.stats()["num_generated_tokens"] == 0:
            threading.Event().wait(0.01)
        assert client.update_weights(tiny_model(seed=1), transport="grpc", abort_running=True) == 1
        worker.join()
        sample = results[0].outputs[0]
        assert sample.finish_reason == "abort" and sample.weight_version == 0
        assert len(sample.token_ids) < 400
