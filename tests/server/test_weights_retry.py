"""An update the client was told failed never lands later, and a retry of one that did land is not applied twice."""

import threading
import time

import pytest
import torch

from rollout import SamplingParams
from rollout.client.weight_push import WeightSyncError
from tests.builders import tiny_model
from tests.server.server_builders import client_for, slow_steps, wait_for
from tests.weights.server_builders import PROMPTS, greedy_tokens, reference_tokens, weight_server

LONG = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)


def weights_of(server) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in server.loop.engine.model.state_dict().items()}


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def test_an_update_whose_deadline_passes_waiting_for_an_idle_engine_is_never_committed() -> None:
    with weight_server(seed=0, max_model_len=512) as server, client_for(server) as client:
        before = weights_of(server)
        slow_steps(server.loop.engine)  # 200 steps of >= 10 ms: the engine stays busy for over 2 s
        done = threading.Event()
        running = threading.Thread(
            target=lambda: (client.generate(PROMPTS[:1], LONG, timeout=60), done.set())
        )
        running.start()
        wait_for(lambda: server.loop.stats()["num_generated_tokens"] > 0, what="a generated token")
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(tiny_model(seed=1), transport="grpc", timeout_s=0.5)
        assert "DEADLINE_EXCEEDED" in info.value.failures[server.address]
        running.join(60)
        assert done.is_set()
        time.sleep(0.3)  # the old server committed right after the running request finished
        assert server.loop.engine.weight_version == 0
        assert same_weights(weights_of(server), before)
        assert greedy_tokens(client) == reference_tokens(0)


def test_a_new_request_is_admitted_at_once_after_a_waiting_update_timed_out() -> None:
    with weight_server(seed=0, max_model_len=512) as server, client_for(server) as client:
        slow_steps(server.loop.engine)
        running = threading.Thread(target=client.generate, args=(PROMPTS[:1], LONG), kwargs={"timeout": 60})
        running.start()
        wait_for(lambda: server.loop.stats()["num_generated_tokens"] > 0, what="a generated token")
        with pytest.raises(WeightSyncError):
            client.update_weights(tiny_model(seed=1), transport="grpc", timeout_s=0.3)
        short = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
        out = client.generate(PROMPTS[1:2], short, timeout=60)  # no longer queued behind the dead update
        assert out[0].outputs[0].finish_reason == "length"
        assert running.is_alive()  # it finished while the long one still ran
        running.join(60)


def slow_commit(server, delay: float) -> None:
    """The commit lands, then takes `delay` s more to return: longer than the client will wait."""
    engine = server.loop.engine
    apply = engine.update_weights

    def slow(*args, **kwargs):
        version = apply(*args, **kwargs)
        time.sleep(delay)
        return version

    engine.update_weights = slow


def test_retrying_an_update_that_landed_after_the_deadline_returns_its_version_and_applies_once() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        slow_commit(server, delay=1.0)
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(tiny_model(seed=1), transport="grpc", timeout_s=0.5)
        assert info.value.update_id
        wait_for(lambda: server.loop.engine.weight_version == 1, what="the late commit")
        retried = client.update_weights(tiny_model(seed=1), transport="grpc", update_id=info.value.update_id)
        assert retried == 1
        assert server.loop.engine.weight_version == 1
        assert greedy_tokens(client) == reference_tokens(1)


def test_an_explicit_version_retry_with_the_same_tensors_succeeds_and_other_tensors_are_refused() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        assert client.update_weights(tiny_model(seed=1), transport="grpc", version=5) == 5
        assert client.update_weights(tiny_model(seed=1), transport="grpc", version=5) == 5
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(tiny_model(seed=2), transport="grpc", version=5)
        assert "INVALID_ARGUMENT" in info.value.failures[server.address]
        assert server.loop.engine.weight_version == 5
        assert greedy_tokens(client) == reference_tokens(1)


def test_a_lower_version_is_still_refused_after_an_update() -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        assert client.update_weights(tiny_model(seed=1), transport="grpc", version=5) == 5
        with pytest.raises(WeightSyncError) as info:
            client.update_weights(tiny_model(seed=1), transport="grpc", version=4)
        assert "INVALID_ARGUMENT" in info.value.failures[server.address]


def test_the_same_update_id_on_disk_returns_the_committed_version(tmp_path) -> None:
    with weight_server(seed=0) as server, client_for(server) as client:
        first = client.update_weights(tiny_model(seed=1), transport="disk", path=tmp_path, update_id="u-1")
        again = client.update_weights(None, transport="disk", path=tmp_path, update_id="u-1")
        assert first == again == 1
        assert server.loop.engine.weight_version == 1
