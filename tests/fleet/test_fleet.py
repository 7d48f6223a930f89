"""A local Ray fleet of 2 `rollout serve` processes on CPU: spread, push to all, a server dying.

One Ray instance and one fleet for the module (Ray starts in seconds, each server in a few more).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import torch

ray = pytest.importorskip("ray", reason='the fleet tests need the ray extra: pip install "rollout[ray]"')

from transformers import AutoModelForCausalLM  # noqa: E402

from rollout import LLM, EngineConfig, SamplingParams  # noqa: E402
from rollout.assets import default_model_path  # noqa: E402
from rollout.fleet import Fleet  # noqa: E402

GREEDY = SamplingParams(n=2, max_tokens=8, temperature=0.0)
PROMPTS = [f"{a}+{b}=" for a, b in ((12, 7), (3, 45), (60, 18), (9, 9), (21, 30), (5, 77))]


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        with Fleet(2, serve_args=["--num-blocks", "256"], num_cpus=1, env={"OMP_NUM_THREADS": "1"}) as f:
            yield f
    finally:
        ray.shutdown()


def _served(client, address: str) -> int:
    for line in client.metrics(address).splitlines():
        if line.startswith("rollout_requests_total "):
            return int(float(line.split()[1]))
    raise AssertionError("no rollout_requests_total metric")


def _perturbed_default_model() -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(default_model_path())
    with torch.no_grad():
        for param in model.parameters():
            param.add_(
                torch.randn(param.shape, generator=torch.Generator().manual_seed(param.numel())) * 0.05
            )
    return model


def test_a_fleet_client_spreads_prompts_and_a_push_updates_every_server(fleet: Fleet) -> None:
    with fleet.client() as client:
        before = [_served(client, a) for a in fleet.addresses]
        client.generate(PROMPTS, GREEDY)
        assert all(_served(client, a) > b for a, b in zip(fleet.addresses, before, strict=True))
        new = _perturbed_default_model()
        version = client.update_weights(new, transport="grpc")
        assert [client.server_info(a).weight_version for a in fleet.addresses] == [version, version]
        outputs = client.generate(PROMPTS, GREEDY)
    fresh = LLM(model=new, tokenizer=str(default_model_path()), config=EngineConfig(num_blocks=256))
    assert [o.outputs[0].token_ids for o in outputs] == [
        o.outputs[0].token_ids for o in fresh.generate(PROMPTS, GREEDY)
    ]


def test_a_server_that_dies_is_reported_and_the_call_finishes_on_the_other(fleet: Fleet) -> None:
    """Runs last: it kills server 0 (SIGKILL) while it holds part of a call."""
    long = SamplingParams(n=2, max_tokens=160, temperature=0.0, ignore_eos=True)
    with fleet.client(max_retries=1) as client:
        expected = [o.outputs for o in client.generate(PROMPTS, long, request_id_prefix="before")]
        served = _served(client, fleet.addresses[0])
        result: dict[str, object] = {}
        call = threading.Thread(target=lambda: result.update(out=client.generate(PROMPTS, long)))
        call.start()
        deadline = time.monotonic() + 60
        while _served(client, fleet.addresses[0]) == served and time.monotonic() < deadline:
            time.sleep(0.005)  # until server 0 holds part of this call
        fleet.stop_server(0, kill=True)
        call.join(timeout=120)
        assert not call.is_alive() and "out" in result
        assert [o.outputs for o in result["out"]] == expected
        assert list(client.dead_servers) == [fleet.addresses[0]]
        client.generate(PROMPTS[:2], GREEDY, request_id_prefix="after")  # the live one alone
        assert list(client.dead_servers) == [fleet.addresses[0]]
