"""Weight updates to a hybrid model's server over gRPC while requests run: under every in-flight policy the
server then serves what a fresh one with the new weights serves (no KV block or state snapshot of the old
version found), gives back every recurrent-state slot, and a recomputed sample continues exactly; LoRA
adapter pushes land on the attention, Mamba2 and MLP projections."""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from peft import LoraConfig, get_peft_model

from rollout import LLM, EngineConfig, SamplingParams
from rollout.outputs import CompletionOutput
from tests.builders import random_prompts
from tests.server.hybrid_builders import CONFIG, HYBRIDS, hybrid_model, hybrid_weight_server
from tests.server.server_builders import client_for, slow_steps, wait_for
from tests.weights.lora_builders import merged_state, set_adapter

TIMEOUT_S = 300.0  # a hang guard
PROMPTS = random_prompts(3, 20, 40, seed=5)
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=0)
LONG = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True, logprobs=0, n=2)
# PEFT refuses LoRA on a Mamba mixer's out_proj and conv1d (its fused kernels read those weights directly).
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "up_proj", "down_proj"]


@dataclass(frozen=True)
class Updated:
    running: list[CompletionOutput]  # the samples of the request that ran through the update
    after: list[list[int]]  # greedy tokens of PROMPTS after the update
    hits_after: int  # prefix-hit tokens while serving `after`
    stats: dict[str, int | float]  # once idle, after `after`


def greedy(llm_or_client: object, prompts: list[list[int]] = PROMPTS) -> list[list[int]]:
    return [out.outputs[0].token_ids for out in llm_or_client.generate(prompts, GREEDY)]


@functools.cache
def fresh_llm(model_type: str) -> LLM:
    """An engine built with the new weights (seed 1)."""
    return LLM(model=hybrid_model(model_type, seed=1), config=EngineConfig(**CONFIG))


@functools.cache
def update_mid_flight(model_type: str, in_flight: str) -> Updated:
    """PROMPTS served (cached: blocks and state snapshots) at version 0, then an update to seed 1's
    weights under `in_flight` while a request of n=2 runs on a slowed server, then PROMPTS again."""
    with hybrid_weight_server(model_type, seed=0) as server, client_for(server) as client:
        greedy(client)
        slow_steps(server.loop.engine)
        generated = server.loop.stats()["num_generated_tokens"]
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(client.generate, PROMPTS[:1], LONG, timeout=TIMEOUT_S)
            wait_for(lambda: server.loop.stats()["num_generated_tokens"] > generated, TIMEOUT_S, "a token")
            new = hybrid_model(model_type, seed=1)
            assert client.update_weights(new, in_flight=in_flight, timeout_s=TIMEOUT_S) == 1
            (result,) = running.result(timeout=TIMEOUT_S)
        wait_for(lambda: server.loop.stats()["num_requests_unfinished"] == 0, TIMEOUT_S, "idle")
        hits = server.loop.stats()["num_prefix_hit_tokens"]
        after = greedy(client)
        wait_for(lambda: server.loop.stats()["num_requests_unfinished"] == 0, TIMEOUT_S, "idle")
        stats = server.loop.stats()
    return Updated(result.outputs, after, stats["num_prefix_hit_tokens"] - hits, stats)


@pytest.mark.parametrize("in_flight", ["wait", "abort", "keep", "recompute"])
@pytest.mark.parametrize("model_type", HYBRIDS)
def test_after_an_update_a_hybrid_server_serves_what_a_fresh_one_with_the_new_weights_serves(
    model_type: str, in_flight: str
) -> None:
    updated = update_mid_flight(model_type, in_flight)
    assert updated.after == greedy(fresh_llm(model_type))
    if in_flight != "recompute":  # nothing computed with the new weights was there to hit
        assert updated.hits_after == 0
    expected_reason = "abort" if in_flight == "abort" else "length"
    assert {s.finish_reason for s in updated.running} == {expected_reason}


@pytest.mark.parametrize("in_flight", ["wait", "abort", "keep", "recompute"])
@pytest.mark.parametrize("model_type", HYBRIDS)
def test_an_update_mid_flight_leaves_no_state_slot_or_block_held(model_type: str, in_flight: str) -> None:
    stats = update_mid_flight(model_type, in_flight).stats
    assert stats["num_state_slots"] == 0
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_a_recomputed_hybrid_sample_continues_as_a_fresh_server_with_the_new_weights_would(
    model_type: str,
) -> None:
    """Recompute rebuilds the recurrent states from the prompt and the tokens sampled so far: the rest
    of the sample is what the new weights generate from those tokens."""
    for sample in update_mid_flight(model_type, "recompute").running:
        (_, old), (switch, new) = sample.weight_versions
        assert (old, new) == (0, 1) and sample.kv_versions == [(0, 0), (switch, 1)]
        head = PROMPTS[0] + sample.token_ids[:switch]
        rest = SamplingParams(temperature=0, max_tokens=LONG.max_tokens - switch, ignore_eos=True)
        (fresh,) = fresh_llm(model_type).generate([head], rest)
        assert sample.token_ids[switch:] == fresh.outputs[0].token_ids


def test_a_lora_adapter_push_to_nemotron_h_serves_what_a_push_of_its_merged_weights_serves() -> None:
    config = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS)
    policy = set_adapter(get_peft_model(hybrid_model("nemotron_h", seed=0), config), 1)
    reference = LLM(model=hybrid_model("nemotron_h", seed=0), config=EngineConfig(**CONFIG))
    with hybrid_weight_server("nemotron_h", seed=0) as server, client_for(server) as client:
        before = greedy(client)
        assert client.update_weights(policy) == 1
        first = greedy(client)
        assert client.update_weights(set_adapter(policy, 2)) == 2  # merged into the base, not the last merge
        second = greedy(client)
    reference.update_weights(merged_state(set_adapter(policy, 1)))
    assert first == greedy(reference) != before
    reference.update_weights(merged_state(set_adapter(policy, 2)))
    assert second == greedy(reference)
