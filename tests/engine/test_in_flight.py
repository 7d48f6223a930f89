"""In-flight update policies: abort returns what was made, keep and recompute continue exactly as their
references do (a fresh engine / a teacher-forced forward / transformers on a DynamicCache), spans are
exact, and no policy loses a token, leaks a block or serves a prefix of older weights."""

import pytest
import torch

from rollout import EngineConfig, SamplingParams
from rollout.engine.llm_engine import LLMEngine
from tests.builders import random_prompts, reference_copy, tiny_llm, tiny_model
from tests.engine.in_flight_builders import (
    keep_reference,
    output_len,
    run_to_completion,
    step_until,
    teacher_forced_logprobs,
)

TOL = 1e-4
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=0)
BEFORE = 5  # tokens sampled under the old weights


def engine_at(prompt: list[int], params: SamplingParams = GREEDY, **config: object) -> LLMEngine:
    """An engine on tiny_model(seed=0) whose request "r" has sampled BEFORE tokens."""
    engine = tiny_llm(seed=0, **config).engine
    engine.add_request("r", prompt, params)
    step_until(engine, {}, lambda: output_len(engine, "r") == BEFORE)
    return engine


def assert_no_block_leaked(engine: LLMEngine) -> None:
    assert not engine.has_unfinished_requests()
    assert engine.stats()["num_blocks_free"] == engine.stats()["num_blocks_total"]


def test_recompute_continues_like_a_fresh_engine_with_the_new_weights() -> None:
    prompt = random_prompts(1, 21, 21, seed=1)[0]
    engine = engine_at(prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=0, n=2))
    new = tiny_model(seed=1)
    engine.update_weights(new.state_dict(), in_flight="recompute")
    samples = run_to_completion(engine)["r"]
    head = samples[0].token_ids[:BEFORE]
    fresh = tiny_llm(seed=1).generate(
        [prompt + head], SamplingParams(temperature=0, max_tokens=12 - BEFORE, ignore_eos=True)
    )
    old_lp = teacher_forced_logprobs(reference_copy(tiny_model(seed=0)), prompt, samples[0].token_ids)
    new_lp = teacher_forced_logprobs(reference_copy(new), prompt, samples[0].token_ids)
    for sample in samples:
        assert sample.token_ids == head + fresh[0].outputs[0].token_ids
        got = torch.tensor(sample.token_logprobs)
        torch.testing.assert_close(got[:BEFORE], old_lp[:BEFORE], atol=TOL, rtol=0)
        torch.testing.assert_close(got[BEFORE:], new_lp[BEFORE:], atol=TOL, rtol=0)
        assert sample.weight_versions == [(0, 0), (BEFORE, 1)]
        assert sample.kv_versions == [(0, 0), (BEFORE, 1)]
        assert sample.weight_version == 0
    assert engine.stats()["last_update_tokens_recomputed"] == 2 * (len(prompt) + BEFORE - 1)
    assert_no_block_leaked(engine)


def test_keep_continues_on_the_old_kv_like_transformers_with_a_dynamic_cache() -> None:
    prompt = random_prompts(1, 21, 21, seed=2)[0]
    engine = engine_at(prompt)
    new_state = tiny_model(seed=1).state_dict()
    head = engine.requests["r"].sequences[0].output_token_ids
    engine.update_weights(new_state, in_flight="keep")
    (sample,) = run_to_completion(engine)["r"]
    tokens, logprobs = keep_reference(
        reference_copy(tiny_model(seed=0)), new_state, prompt + head, 12 - BEFORE
    )
    assert sample.token_ids == head + tokens
    torch.testing.assert_close(
        torch.tensor(sample.token_logprobs[BEFORE:]), torch.tensor(logprobs), atol=TOL, rtol=0
    )
    assert sample.weight_versions == [(0, 0), (BEFORE, 1)]
    assert sample.kv_versions == [(0, 0)]
    assert engine.stats()["last_update_tokens_kept"] == len(prompt) + BEFORE - 1
    assert_no_block_leaked(engine)


def test_abort_returns_every_sampled_token_at_once_and_unstarted_requests_run_on_the_new_weights() -> None:
    prompt, late = random_prompts(2, 21, 21, seed=3)
    engine = engine_at(
        prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=0, n=2), max_num_seqs=2
    )
    head = engine.requests["r"].sequences[0].output_token_ids
    logprobs = list(engine.requests["r"].sequences[0].logprobs)
    engine.add_request("late", late, GREEDY)  # no seat yet: it has sampled nothing
    engine.update_weights(tiny_model(seed=1).state_dict(), in_flight="abort")
    first = engine.step()
    assert [out.request_id for out in first] == ["r"] and first[0].finished
    for sample in first[0].outputs:
        assert (sample.token_ids, sample.token_logprobs, sample.finish_reason) == (head, logprobs, "abort")
        assert sample.weight_versions == [(0, 0)] and sample.weight_version == 0
    assert engine.stats()["last_update_tokens_returned_partial"] == 2 * BEFORE
    (sample,) = run_to_completion(engine)["late"]
    fresh = tiny_llm(seed=1).generate([late], GREEDY)[0].outputs[0]
    assert (sample.token_ids, sample.weight_versions) == (fresh.token_ids, [(0, 1)])
    assert_no_block_leaked(engine)


def test_wait_refuses_while_requests_run_and_changes_nothing() -> None:
    prompt = random_prompts(1, 10, 10, seed=4)[0]
    engine = engine_at(prompt)
    before = engine.model.model.norm.weight.clone()
    with pytest.raises(RuntimeError, match="idle"):
        engine.update_weights({"model.norm.weight": torch.zeros(64)}, in_flight="wait")
    with pytest.raises(ValueError, match="in_flight"):
        engine.update_weights({"model.norm.weight": torch.zeros(64)}, in_flight="later")
    assert torch.equal(engine.model.model.norm.weight, before) and engine.weight_version == 0
    (sample,) = run_to_completion(engine)["r"]
    assert sample.token_ids == tiny_llm(seed=0).generate([prompt], GREEDY)[0].outputs[0].token_ids


def test_kv_kept_across_an_update_is_never_served_from_the_prefix_cache() -> None:
    prompt = random_prompts(1, 10, 10, seed=5)[0]  # block 0 fills after the update, with mixed KV
    engine = engine_at(prompt, block_size=16)
    engine.update_weights(tiny_model(seed=1).state_dict(), in_flight="keep")
    (sample,) = run_to_completion(engine)["r"]
    hits = engine.stats()["num_prefix_hit_tokens"]
    follow_up = prompt + sample.token_ids[:8]
    engine.add_request("next", follow_up, GREEDY)
    (again,) = run_to_completion(engine)["next"]
    assert engine.stats()["num_prefix_hit_tokens"] == hits
    assert again.token_ids == tiny_llm(seed=1).generate([follow_up], GREEDY)[0].outputs[0].token_ids


def test_max_staleness_keeps_kv_until_it_falls_more_than_k_versions_behind() -> None:
    prompt = random_prompts(1, 12, 12, seed=6)[0]
    engine = engine_at(prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, max_staleness=1))
    engine.update_weights(tiny_model(seed=1).state_dict(), in_flight="recompute")
    assert engine.stats()["last_update_tokens_kept"] == len(prompt) + BEFORE - 1
    engine.step()
    engine.update_weights(tiny_model(seed=2).state_dict(), in_flight="recompute")
    assert engine.stats()["last_update_tokens_recomputed"] == len(prompt) + BEFORE
    (sample,) = run_to_completion(engine)["r"]
    assert sample.weight_versions == [(0, 0), (BEFORE, 1), (BEFORE + 1, 2)]
    assert sample.kv_versions == [(0, 0), (BEFORE + 1, 2)]


def test_keep_recomputes_beyond_the_engine_default_max_staleness() -> None:
    prompt = random_prompts(1, 12, 12, seed=7)[0]
    engine = engine_at(prompt, max_staleness=0)
    assert engine.config == EngineConfig(num_blocks=256, max_staleness=0)
    engine.update_weights(tiny_model(seed=1).state_dict(), in_flight="keep")
    (sample,) = run_to_completion(engine)["r"]
    assert sample.kv_versions == [(0, 0), (BEFORE, 1)]


def test_max_staleness_must_be_a_non_negative_integer() -> None:
    with pytest.raises(ValueError, match="max_staleness"):
        SamplingParams(max_staleness=-1)
    with pytest.raises(ValueError, match="max_staleness"):
        EngineConfig(max_staleness=-1)


def test_the_server_default_max_staleness_is_a_serve_flag() -> None:
    import argparse

    from rollout.commands.engine_args import add_engine_args, engine_config

    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    assert engine_config(parser.parse_args(["--max-staleness", "2"])).max_staleness == 2
    assert engine_config(parser.parse_args([])).max_staleness is None


def test_keep_during_a_chunked_prefill_reports_the_older_kv_of_the_first_token() -> None:
    prompt = random_prompts(1, 40, 40, seed=8)[0]
    engine = tiny_llm(seed=0, max_num_batched_tokens=16).engine
    engine.add_request("r", prompt, GREEDY)
    engine.step()  # 16 of 40 prompt tokens computed with version 0
    assert engine.requests["r"].sequences[0].num_computed_tokens == 16
    engine.update_weights(tiny_model(seed=1).state_dict(), in_flight="keep")
    (sample,) = run_to_completion(engine)["r"]
    assert sample.weight_versions == [(0, 1)] and sample.kv_versions == [(0, 0)]
    assert sample.weight_version == 1
    assert engine.stats()["num_blocks_cached"] == 0  # blocks holding version-0 KV were never cached
