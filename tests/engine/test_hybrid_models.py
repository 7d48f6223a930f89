"""Hybrid models (attention + recurrent layers) and recurrent-only ones (Mamba, Mamba-2): per-sequence
states stay exact through chunked prefill, n samples forked from one prompt, preemption, weight
updates (prefix caching on hybrids: test_hybrid_prefix_caching.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.hybrid import position_wise_layers, recurrent_layers
from rollout.engine.hybrid.state_pool import StatePool
from rollout.engine.model.model_guard import UnsupportedModelError
from tests.builders import random_prompts
from tests.engine.in_flight_builders import keep_reference
from tests.models.zoo import HYBRID, Family, build

TOL = 1e-4
TESTED = (
    "lfm2",
    "qwen3_next",
    "jamba",
    "bamba",
    "nemotron_h",
    "mamba2",
    "mamba",
    "falcon_mamba",
    "kimi_linear",
    "zamba2",
    "zaya",
    "bailing_hybrid",
)
FAMILIES = [f for f in HYBRID if f.model_type in TESTED]
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
            assert (torch.tensor(sample.token_logprobs) - expected).abs().max().item() <= TOL


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


def test_no_state_snapshots_turn_prefix_caching_off_and_the_stats_say_so() -> None:
    """max_state_snapshots=0: a hit would have no recurrent state to resume from, so none is taken."""
    llm = hybrid_llm(FAMILIES[0], max_state_snapshots=0)
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


@pytest.mark.parametrize("kind", ["conv_states", "recurrent_states"])
@pytest.mark.parametrize("family", HYBRID, ids=lambda f: f.model_type)
def test_halving_one_kind_of_state_mid_generation_fails_the_exactness_check(
    family: Family, kind: str
) -> None:
    """The exactness tests can fail on each kind of state alone: with every running sample's conv states, or
    its recurrent (SSM / linear-attention) states, halved after its third token, the engine's logprobs leave
    the teacher-forced ones by far more than TOL (the zoo's `tune` hooks make each state reach the logits)."""
    engine, prompt = hybrid_llm(family).engine, random_prompts(1, 20, 20, seed=8)[0]
    engine.add_request("r", prompt, SEEDED)
    while not any(seq.num_output_tokens >= 3 for seq in engine.requests["r"].sequences):
        engine.step()
    slots = [engine.runner.states.slot(seq.seq_id, fresh=False) for seq in engine.requests["r"].sequences]
    if not _states(slots[0], kind):
        pytest.skip(f"{family.model_type} keeps no {kind}")
    with torch.inference_mode():  # the engine's states are inference tensors
        for state in (state for slot in slots for state in _states(slot, kind)):
            state.mul_(0.5)
    samples = []
    while engine.has_unfinished_requests():
        samples += [s for out in engine.step() for s in out.outputs]
    reference = build(family)
    gap = max(
        (torch.tensor(s.token_logprobs) - teacher_forced_logprobs(reference, prompt, list(s.token_ids)))
        .abs()
        .max()
        for s in samples
    )
    assert gap > 1e-3


def _states(slot: DynamicCache, kind: str) -> list[torch.Tensor]:
    """A slot's tensors of one kind (`conv_states` or `recurrent_states`), every layer and index."""
    return [s for layer in slot.layers for s in getattr(layer, kind, {}).values() if s is not None]


def test_an_unsupported_recurrent_layer_is_refused_by_name() -> None:
    """A recurrent layer the adapter does not drive (MiniMax's lightning attention, which keeps its state
    in its own cache class) is refused, naming it."""
    from tests.models.zoo import REFUSED

    minimax = next(f for f in REFUSED if f.model_type == "minimax")
    with pytest.raises(ValueError, match="keep state between steps .*MiniMaxLightningAttention"):
        LLM(model=build(minimax), config=EngineConfig(num_blocks=32))


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
        got = torch.tensor(sample.token_logprobs)
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
        torch.tensor(sample.token_logprobs[len(head) :]), torch.tensor(logprobs), atol=TOL, rtol=0
    )
    assert sample.weight_versions == [(0, 0), (len(head), 1)]


class TokenShift(torch.nn.Module):
    """A token mixer the engine does not know: each row takes its predecessor's."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.zeros_like(hidden_states[:, :1]), hidden_states[:, :-1]], dim=1)


def test_an_unknown_token_mixer_beside_position_wise_layers_is_refused_by_name() -> None:
    """Nemotron-H's MLP-only and MoE-only layers call no attention; a layer whose block is anything else
    is still expected to, and is refused naming what it holds."""
    model = build(next(f for f in HYBRID if f.model_type == "nemotron_h"))
    model.model.layers[3].mixer = TokenShift()  # was the MLP-only layer
    with pytest.raises(ValueError, match=r"layers without one: model\.layers\.3 holds mixer: TokenShift"):
        LLM(model=model, config=EngineConfig(num_blocks=32, max_model_len=64))


def test_a_model_without_attention_layers_sizes_blocks_without_a_kv_budget() -> None:
    """Mamba-2 keeps no KV: its blocks only count positions, as many as max_num_seqs full sequences."""
    family = next(f for f in HYBRID if f.model_type == "mamba2")
    llm = LLM(model=build(family), config=EngineConfig(block_size=4, max_model_len=64, max_num_seqs=8))
    assert llm.engine.model_info.num_blocks == 16 * 8
    assert all(k.numel() == v.numel() == 0 for k, v in llm.engine.local_runner.kv_caches)
    assert llm.engine.stats()["prefix_caching"] == 1  # hits resume from state snapshots alone


def test_a_model_declaring_no_context_length_serves_the_configured_one() -> None:
    """Mamba has no positions and its config no context length: max_model_len decides, and is required."""
    family = next(f for f in HYBRID if f.model_type == "mamba")
    with pytest.raises(ValueError, match=r"context length; set EngineConfig\.max_model_len"):
        LLM(model=build(family), config=EngineConfig(num_blocks=32))
    assert LLM(model=build(family), config=EngineConfig(max_model_len=48)).engine.max_model_len == 48


@pytest.mark.parametrize("model_type", ["mamba", "falcon_mamba"])
def test_mamba_chunks_that_continue_a_state_need_the_token_by_token_route(
    model_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mamba's multi-token scan starts from zero: run whole, a continued chunk is wrong, and the load-time
    self-check (chunked prefill) refuses it."""
    monkeypatch.setattr(recurrent_layers, "_STEPWISE", frozenset())
    family = next(f for f in HYBRID if f.model_type == model_type)
    with pytest.raises(UnsupportedModelError, match=rf"model_type '{model_type}'.*differ"):
        LLM(model=build(family), config=EngineConfig(num_blocks=32, max_model_len=64))


def test_a_token_mixer_wrongly_listed_as_position_wise_is_refused_by_the_self_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The names in POSITION_WISE are a claim; the self-check (packed sequences, chunked prefill) is the
    proof: a token mixer listed there loses its context across chunks and the model is refused."""
    listed = position_wise_layers.POSITION_WISE | {"TokenShift"}
    monkeypatch.setattr(position_wise_layers, "POSITION_WISE", listed)
    model = build(next(f for f in HYBRID if f.model_type == "nemotron_h"))
    model.model.layers[3].mixer = TokenShift()
    with pytest.raises(UnsupportedModelError, match=r"model_type 'nemotron_h'.*differ"):
        LLM(model=model, config=EngineConfig(num_blocks=32, max_model_len=64))


def test_a_layer_using_the_caches_states_is_refused_by_name_whatever_its_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """zaya's q/k/v projection keeps conv and recurrent states but has no stateful word in its class name:
    unsupported, bf16 loaded it (its self-check gap, 0.043, is under bf16's noise bound)."""
    monkeypatch.setattr(recurrent_layers, "SUPPORTED", recurrent_layers.SUPPORTED - {"ZayaCCAProjection"})
    zaya = next(f for f in HYBRID if f.model_type == "zaya")
    with pytest.raises(ValueError, match="keep state between steps .*ZayaCCAProjection"):
        LLM(model=build(zaya).to(torch.bfloat16), config=EngineConfig(num_blocks=32))
