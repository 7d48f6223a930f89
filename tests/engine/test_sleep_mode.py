"""Sleep mode on the offline LLM (vLLM's `sleep` / `wake_up` / `is_sleeping`): outputs after a wake-up equal a
fresh engine's, level 2's weights come back only through an update (a parameter left out is named, never
served), nothing runs while asleep, and a refusal changes nothing."""

from __future__ import annotations

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.sleep.engine_memory import SleepModeError
from tests.builders import random_prompts, tiny_llm, tiny_model

PROMPTS = random_prompts(4, 5, 40, seed=3)
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, logprobs=2)
SEEDED = SamplingParams(n=3, max_tokens=12, temperature=1.0, top_p=0.9, seed=7, logprobs=0)


def results(llm: LLM) -> list[tuple]:
    outs = llm.generate(PROMPTS, GREEDY) + llm.generate(PROMPTS, SEEDED)
    return [(c.token_ids, c.token_logprobs, c.top_logprobs) for out in outs for c in out.outputs]


@pytest.mark.parametrize("level", [1, 2])
def test_a_woken_engine_generates_what_a_fresh_engine_generates(level: int) -> None:
    fresh = results(tiny_llm(seed=1))
    llm = tiny_llm(seed=1)
    results(llm)  # fills the prefix cache
    llm.sleep(level=level)
    assert llm.is_sleeping() and llm.stats()["num_blocks_cached"] == 0
    llm.wake_up(tags=["weights"])
    if level == 2:
        llm.update_weights(tiny_model(seed=1).state_dict())
    llm.wake_up(tags=["kv_cache"])
    assert not llm.is_sleeping()
    assert results(llm) == fresh


def test_level_2_weights_come_back_as_the_update_wrote_them() -> None:
    fresh = results(tiny_llm(seed=2))
    llm = tiny_llm(seed=1)
    llm.sleep(level=2)
    llm.wake_up()
    llm.update_weights(tiny_model(seed=2).state_dict())
    assert results(llm) == fresh


def test_level_2_refuses_to_generate_until_every_parameter_is_written_again() -> None:
    llm = tiny_llm(seed=1)
    llm.sleep(level=2)
    llm.wake_up()
    new = tiny_model(seed=2).state_dict()
    llm.update_weights({"model.norm.weight": new["model.norm.weight"]})
    with pytest.raises(SleepModeError, match=r"parameters were not written since \(e.g. model.embed_tokens"):
        llm.generate(PROMPTS, GREEDY)
    llm.update_weights({k: v for k, v in new.items() if k != "model.norm.weight"})
    assert results(llm) == results(tiny_llm(seed=2))


def test_nothing_generates_or_updates_while_asleep_and_the_refusal_names_what_to_call() -> None:
    llm = tiny_llm(seed=1)
    before = results(llm)
    llm.sleep(level=1)
    with pytest.raises(SleepModeError, match=r"sleeping \(level 1; asleep: kv_cache, weights\).*wake_up\(\)"):
        llm.generate(PROMPTS, GREEDY)
    with pytest.raises(SleepModeError, match=r"wake_up\(tags=\['weights'\]\)"):
        llm.update_weights(tiny_model(seed=2).state_dict())
    llm.wake_up(tags=["weights"])
    with pytest.raises(SleepModeError, match="asleep: kv_cache"):
        llm.generate(PROMPTS, GREEDY)
    llm.wake_up()
    assert llm.weight_version == 0 and results(llm) == before


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda llm: llm.sleep(level=3), ValueError, "level must be 1 or 2"),
        (lambda llm: llm.wake_up(tags=["kv"]), ValueError, "tags: unknown kv"),
        (lambda llm: llm.wake_up(tags="weights"), ValueError, "tags must be a list"),
    ],
    ids=["level", "unknown-tag", "tags-not-a-list"],
)
def test_bad_arguments_are_refused_by_name_and_change_nothing(call, error, match) -> None:
    llm = tiny_llm(seed=1)
    before = results(llm)
    with pytest.raises(error, match=match):
        call(llm)
    assert not llm.is_sleeping() and results(llm) == before


def test_sleeping_twice_is_refused() -> None:
    llm = tiny_llm(seed=1)
    llm.sleep(level=1)
    with pytest.raises(SleepModeError, match=r"already sleeping \(level 1\)"):
        llm.sleep(level=2)


def test_the_engine_does_not_sleep_with_requests_in_flight() -> None:
    llm = tiny_llm(seed=1)
    llm.engine.add_request("r", PROMPTS[0], GREEDY)
    with pytest.raises(SleepModeError, match="requests are in flight"):
        llm.sleep()
    assert not llm.is_sleeping()


def test_level_2_refuses_while_lora_adapters_are_merged_into_a_kept_base() -> None:
    from peft import LoraConfig, get_peft_model

    llm = tiny_llm(seed=1)
    peft = get_peft_model(
        tiny_model(seed=1), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)
    )
    llm.update_weights(peft)
    with pytest.raises(SleepModeError, match="LoRA adapters"):
        llm.sleep(level=2)
    llm.sleep(level=1)


def test_cuda_graphs_are_recaptured_after_a_wake_up_on_a_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    llm = tiny_llm(seed=1, device="cuda")
    before = results(llm)
    llm.sleep(level=1)
    llm.wake_up()
    assert llm.engine.local_runner.decode_graphs is not None and results(llm) == before


def test_a_model_built_for_the_llm_is_served_from_its_own_storage_again() -> None:
    model = tiny_model(seed=1)
    llm = LLM(model=model, config=EngineConfig(num_blocks=64))
    ptr = model.get_parameter("model.norm.weight")
    llm.sleep(level=2)
    assert ptr.untyped_storage().nbytes() == 0  # given back, not copied aside
    llm.wake_up()
    assert ptr.untyped_storage().nbytes() == ptr.numel() * 4


@pytest.mark.parametrize("family", ["qwen3_next", "gpt2"])
def test_a_hybrid_or_another_family_wakes_up_to_a_fresh_engines_outputs(family: str) -> None:
    """A hybrid model's recurrent-state snapshots go with the prefix cache; every family's KV pools come back."""
    from tests.models.zoo import HYBRID, build

    families = {f.model_type: f for f in HYBRID}

    def make() -> LLM:
        model = build(families[family], seed=1) if family in families else tiny_model(family, seed=1)
        return LLM(model=model, config=EngineConfig(num_blocks=128))

    fresh = results(make())
    llm = make()
    results(llm)
    llm.sleep(level=2)
    assert llm.stats()["num_blocks_cached"] == 0 and llm.stats()["num_state_snapshots"] == 0
    llm.wake_up()
    llm.update_weights(make().engine.model.state_dict())
    assert results(llm) == fresh
