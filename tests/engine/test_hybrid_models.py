"""Hybrid models (attention + recurrent layers): per-sequence states stay exact through chunked
prefill, n samples forked from one prompt, preemption, weight updates; prefix caching is off."""

from __future__ import annotations

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.hybrid import recurrent_layers
from rollout.engine.hybrid.state_pool import StatePool
from tests.builders import random_prompts
from tests.engine.in_flight_builders import keep_reference
from tests.models.zoo import HYBRID, Family, build

TOL = 1e-4
EXACT = ("lfm2", "qwen3_next", "jamba", "bamba", "kimi_linear", "zamba2", "zaya", "bailing_hybrid")
FAMILIES = [f for f in HYBRID if f.model_type in EXACT]
# temperature 2 spreads the samples; "raw" logprobs are the unscaled ones a forward gives
SEEDED = SamplingParams(
    n=3, max_tokens=8, temperature=2.0, seed=5, logprobs=0, logprobs_mode="raw", ignore_eos=True
)


def hybrid_llm(family: Family, seed: int = 0, **config: object) -> LLM:
    config = {"num_blocks": 128, "block_size": 4, "max_num_batched_tokens": 12, "max_model_len": 64, **config}
    return LLM(model=build(family, seed), config=EngineConfig(**config))


def teacher_forced_logprobs(model: torch.nn.Module, prompt: list[int], completion: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion]), use_cache=False).logits[0].float()
    rows = logits[len(prompt) - 1 : -1].log_softmax(-1)
    return rows.gather(1, torch.tensor(completion)[:, None])[:, 0]


def assert_exact(reference: torch.nn.Module, prompts: list[list[int]], outputs) -> None:
    for prompt, output in zip(prompts, outputs, strict=True):
        for sample in output.outputs:
            expected = teacher_forced_logprobs(reference, prompt, list(sample.token_ids))
            assert (torch.tensor(sample.logprobs) - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model_type)
def test_forked_samples_each_continue_the_prompts_state(family: Family) -> None:
    """Prompts longer than the token budget prefill in chunks; each of a prompt's n samples continues
    from a copy of the prompt's state: every sampled token's logprob equals a teacher-forced forward."""
    llm = hybrid_llm(family)
    prompts = random_prompts(3, 15, 30, seed=2)
    outputs = llm.generate(prompts, SEEDED)
    assert_exact(build(family), prompts, outputs)
    assert len({tuple(s.token_ids) for o in outputs for s in o.outputs}) > len(prompts)  # samples differ
    assert len(llm.engine.runner.states) == 0  # every slot given back


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model_type)
def test_preempted_sequences_recompute_their_state_from_scratch(family: Family) -> None:
    roomy = hybrid_llm(family).generate(random_prompts(4, 15, 30, seed=3), SEEDED)
    tight = hybrid_llm(family, num_blocks=24)
    prompts = random_prompts(4, 15, 30, seed=3)
    outputs = tight.generate(prompts, SEEDED)
    assert tight.engine.stats()["num_preemptions"] > 0
    assert [[s.token_ids for s in o.outputs] for o in outputs] == [
        [s.token_ids for s in o.outputs] for o in roomy
    ]
    assert_exact(build(family), prompts, outputs)


def test_prefix_caching_is_off_and_the_stats_say_so() -> None:
    """A hit would skip computing the recurrent state of the cached tokens: never reused."""
    llm = hybrid_llm(FAMILIES[0])
    prompt = random_prompts(1, 30, 30, seed=4)
    greedy = SamplingParams(max_tokens=4, temperature=0.0)
    assert (
        llm.generate(prompt, greedy)[0].outputs[0].token_ids
        == llm.generate(prompt, greedy)[0].outputs[0].token_ids
    )
    stats = llm.engine.stats()
    assert stats["prefix_caching"] == 0 and stats["num_prefix_hit_tokens"] == 0


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.model_type)
def test_after_an_update_outputs_equal_a_fresh_engine(family: Family) -> None:
    llm = hybrid_llm(family)
    prompts = random_prompts(2, 15, 30, seed=6)
    llm.generate(prompts, SEEDED)
    new = build(family, seed=1)
    llm.engine.update_weights(new.state_dict())
    fresh = hybrid_llm(family, seed=1)
    got, want = llm.generate(prompts, SEEDED), fresh.generate(prompts, SEEDED)
    assert [[s.token_ids for s in o.outputs] for o in got] == [[s.token_ids for s in o.outputs] for o in want]
    assert_exact(new, prompts, got)


def test_an_unsupported_recurrent_layer_is_refused_by_name() -> None:
    """A recurrent layer the adapter has not been verified on (Nemotron-H's Mamba2 mixer) is refused."""
    from tests.models.zoo import REFUSED

    nemotron_h = next(f for f in REFUSED if f.model_type == "nemotron_h")
    with pytest.raises(ValueError, match="keep state between steps .*NemotronHMamba2Mixer"):
        LLM(model=build(nemotron_h), config=EngineConfig(num_blocks=32))


@pytest.mark.parametrize("family", FAMILIES[:2], ids=lambda f: f.model_type)
def test_an_update_with_recompute_mid_generation_restarts_the_states(family: Family) -> None:
    """in_flight="recompute": the running samples' states are computed again from their tokens under
    the new weights; the tokens sampled after the update have the new model's teacher-forced logprobs."""
    llm = hybrid_llm(family)
    engine, prompt = llm.engine, random_prompts(1, 20, 20, seed=8)[0]
    params = SamplingParams(
        n=2, max_tokens=10, temperature=2.0, seed=3, logprobs=0, logprobs_mode="raw", ignore_eos=True
    )
    engine.add_request("r", prompt, params)
    while not any(seq.num_output_tokens >= 4 for seq in engine.requests["r"].sequences):
        engine.step()
    before = engine.requests["r"].sequences[0].num_output_tokens
    new = build(family, seed=1)
    engine.update_weights(new.state_dict(), in_flight="recompute")
    samples = []
    while engine.has_unfinished_requests():
        samples += [s for out in engine.step() for s in out.outputs]
    for sample in samples:
        tokens = list(sample.token_ids)
        got = torch.tensor(sample.logprobs)
        old = teacher_forced_logprobs(build(family), prompt, tokens)
        fresh = teacher_forced_logprobs(new, prompt, tokens)
        assert (got[:before] - old[:before]).abs().max().item() <= TOL
        assert (got[before:] - fresh[before:]).abs().max().item() <= TOL
    assert len(engine.runner.states) == 0


def test_a_fork_copies_the_parents_row_not_the_decode_stack_it_views() -> None:
    """After a batched decode a slot's states are row views of that step's stack (stacked_states.py);
    a fork then copies one row each, with the parent's values, and the child's state is its own."""
    family = next(f for f in HYBRID if f.model_type == "qwen3_next")
    pool = StatePool(build(family, 0).config, capacity=4)
    parent = pool.slot(0, fresh=True)
    index = next(i for i, layer in enumerate(parent.layers) if hasattr(layer, "conv_states"))
    stack = torch.randn(16, 8, 4)
    parent.layers[index].conv_states[0] = stack[5:6]
    pool.fork(0, 1)
    child = pool.slot(1, fresh=False).layers[index].conv_states[0]
    assert torch.equal(child, stack[5:6])
    assert child.untyped_storage().nbytes() == stack[5:6].numel() * stack.element_size()
    child.add_(1.0)
    assert torch.equal(parent.layers[index].conv_states[0], stack[5:6])


@pytest.mark.parametrize("family", FAMILIES[:2], ids=lambda f: f.model_type)
def test_an_update_with_keep_continues_the_old_states_as_transformers_cache_does(family: Family) -> None:
    """in_flight="keep": a running sample keeps the KV and the recurrent states its old-weight tokens
    built and continues under the new weights, as transformers' own cache does when the weights change
    under it (the old model fills the cache, the new weights decode on)."""
    engine, prompt = hybrid_llm(family).engine, random_prompts(1, 20, 20, seed=9)[0]
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=0)
    engine.add_request("r", prompt, greedy)
    while engine.requests["r"].sequences[0].num_output_tokens < 5:
        engine.step()
    head = list(engine.requests["r"].sequences[0].output_token_ids)
    new_state = build(family, seed=1).state_dict()
    engine.update_weights(new_state, in_flight="keep")
    samples = []
    while engine.has_unfinished_requests():
        samples += [s for out in engine.step() for s in out.outputs]
    (sample,) = samples
    tokens, logprobs = keep_reference(build(family), new_state, prompt + head, 12 - len(head))
    assert list(sample.token_ids) == head + tokens
    torch.testing.assert_close(
        torch.tensor(sample.logprobs[len(head) :]), torch.tensor(logprobs), atol=TOL, rtol=0
    )
    assert sample.weight_versions == [(0, 0), (len(head), 1)]


def test_a_layer_using_the_caches_states_is_refused_by_name_whatever_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """zaya's q/k/v projection keeps conv and recurrent states but has no stateful word in its class name:
    unsupported, bf16 loaded it (its self-check gap, 0.043, is under bf16's noise bound)."""
    monkeypatch.setattr(recurrent_layers, "SUPPORTED", recurrent_layers.SUPPORTED - {"ZayaCCAProjection"})
    zaya = next(f for f in HYBRID if f.model_type == "zaya")
    with pytest.raises(ValueError, match="keep state between steps .*ZayaCCAProjection"):
        LLM(model=build(zaya).to(torch.bfloat16), config=EngineConfig(num_blocks=32))
