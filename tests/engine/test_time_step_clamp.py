"""Mamba2 mixers whose chunked scan clamps dt to time_step_limit (and whose one-token update does not)
decode as the trainer's full forward does: n samples, chunked prefill, preemption and multi-turn prefix hits
give every sampled token the teacher-forced forward's logprob; without the clamp the self-check refuses,
naming the mixer and the decode steps. test_hybrid_models.py runs the zoo's Nemotron-H and Zamba2 (in this
regime, zoo.py) through forks, preemption and updates too."""

from __future__ import annotations

import inspect

import pytest
import torch

from rollout import LLM, EngineConfig
from rollout.engine.hybrid import recurrent_layers
from rollout.engine.model.model_guard import UnsupportedModelError
from tests.builders import random_prompts
from tests.engine.test_hybrid_models import SEEDED, TOL, assert_exact, hybrid_llm, teacher_forced_logprobs
from tests.models.zoo import HYBRID, Family, build

CLAMPED = [f for f in HYBRID if f.model_type in ("nemotron_h", "zamba2")]
MIXERS = {"nemotron_h": "NemotronHMamba2Mixer", "zamba2": "Zamba2MambaMixer"}


def with_limit(model_type: str, limit: tuple[float, float], **overrides: object) -> Family:
    """A zoo family whose config sets time_step_limit (Bamba, Granite 4, Falcon-H1, Mamba-2 read it)."""
    family = next(f for f in HYBRID if f.model_type == model_type)

    def make_config():
        config = family.make_config()
        for name, value in {"time_step_limit": limit, **overrides}.items():
            setattr(config, name, value)
        return config

    return Family(model_type, make_config, family.note, family.tune)


# dt = softplus(1 + unit-gain projection) spans both bounds; Falcon-H1's dt columns scaled by its mup_vector
LIMITED = [
    with_limit("bamba", (1.0, 1.5)),
    with_limit("granitemoehybrid", (1.0, 1.5)),
    with_limit("falcon_h1", (1.0, 1.5), ssm_multipliers=[1.0, 1.0, 1.0, 1.0, 0.5]),
    with_limit("mamba2", (0.02, 0.03)),  # untuned: dt near each head's init, between 1e-3 and 0.1
]


def one_token_path_gap(model: torch.nn.Module, ids: list[int], prefill: int) -> float:
    """How far transformers' own decoding (a prefill, then one-token updates on its cache, as `generate`
    runs) is from its full forward on `ids`: the largest logprob difference over the vocabulary."""
    names = inspect.signature(model.forward).parameters
    cache_arg = "cache" if "cache" in names else "past_key_values"
    with torch.no_grad():
        full = model(torch.tensor([ids]), use_cache=False).logits[0].log_softmax(-1)
        out = model(torch.tensor([ids[:prefill]]), use_cache=True)
        cache, rows = getattr(out, "cache", None) or out.past_key_values, [out.logits[0]]
        for t in range(prefill, len(ids)):
            positions = {"position_ids": torch.tensor([[t]])} if "position_ids" in names else {}
            rows.append(model(torch.tensor([ids[t : t + 1]]), **{cache_arg: cache}, **positions).logits[0])
    return (torch.cat(rows).log_softmax(-1) - full).abs().max().item()


@pytest.mark.parametrize("family", CLAMPED + LIMITED, ids=lambda f: f.model_type)
def test_transformers_decoding_departs_from_its_full_forward_in_these_models(family: Family) -> None:
    """The regime is real: the tests below would fail if the engine decoded as `generate` does."""
    assert one_token_path_gap(build(family), random_prompts(1, 30, 30, seed=1)[0], prefill=8) > 1e-3


@pytest.mark.parametrize("family", LIMITED, ids=lambda f: f.model_type)
def test_a_configured_time_step_limit_is_kept_on_decode(family: Family) -> None:
    """Both bounds, and Falcon-H1's multiplier on the dt columns: n samples over chunked prefills equal the
    teacher-forced full forward."""
    prompts = random_prompts(3, 15, 30, seed=2)
    assert_exact(build(family), prompts, hybrid_llm(family).generate(prompts, SEEDED))


@pytest.mark.parametrize("family", CLAMPED, ids=lambda f: f.model_type)
def test_each_turn_resumed_from_a_prefix_hit_decodes_as_the_full_forward(family: Family) -> None:
    """Turn k+1 = turn k's prompt + a sampled completion + new text: it resumes from the snapshot at turn
    k's last block boundary, and its n samples have the teacher-forced logprobs."""
    llm, reference = hybrid_llm(family), build(family)
    prompt = random_prompts(1, 13, 13, seed=12)[0]
    for turn in range(3):
        before = llm.engine.stats()["num_prefix_hit_tokens"]
        (output,) = llm.generate([prompt], SEEDED)
        assert_exact(reference, [prompt], [output])
        assert turn == 0 or llm.engine.stats()["num_prefix_hit_tokens"] > before
        prompt = prompt + list(output.outputs[0].token_ids) + [7, 8, 9]


@pytest.mark.parametrize("family", CLAMPED, ids=lambda f: f.model_type)
def test_preempted_samples_recompute_and_decode_as_the_full_forward(family: Family) -> None:
    llm = hybrid_llm(family, num_blocks=24)
    prompts = random_prompts(4, 15, 30, seed=3)
    outputs = llm.generate(prompts, SEEDED)
    assert llm.engine.stats()["num_preemptions"] > 0
    assert_exact(build(family), prompts, outputs)


@pytest.mark.parametrize("family", CLAMPED, ids=lambda f: f.model_type)
def test_without_the_clamp_the_self_check_refuses_naming_the_mixer_on_decode_steps(
    family: Family, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recurrent_layers, "time_step_clamp", lambda module: None)
    mixer = MIXERS[family.model_type]
    with pytest.raises(
        UnsupportedModelError,
        match=rf"prefill chunks \S+, decode steps \S+;.*\({mixer}\) before .* on decode steps;",
    ):
        LLM(model=build(family), config=EngineConfig(num_blocks=32, block_size=4, max_model_len=64))


def test_without_the_clamp_served_logprobs_leave_the_full_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the clamp prevents, with the self-check off: sampled tokens' logprobs off by more than 1e-3."""
    monkeypatch.setattr(recurrent_layers, "time_step_clamp", lambda module: None)
    family = CLAMPED[0]
    llm = hybrid_llm(family, self_check=False)
    prompts = random_prompts(3, 15, 30, seed=2)
    gap = max(
        (torch.tensor(s.token_logprobs) - teacher_forced_logprobs(build(family), p, list(s.token_ids)))
        .abs()
        .max()
        for p, o in zip(prompts, llm.generate(prompts, SEEDED), strict=True)
        for s in o.outputs
    )
    assert gap > 1e-3 > TOL


def test_a_limit_with_a_multiplier_that_is_not_positive_is_refused_by_name() -> None:
    family = with_limit("falcon_h1", (1.0, 1.5), ssm_multipliers=[1.0, 1.0, 1.0, 1.0, -0.5])
    with pytest.raises(ValueError, match=r"FalconH1Mixer \(layer 0\): time_step_limit \(1\.0, 1\.5\)"):
        hybrid_llm(family)
