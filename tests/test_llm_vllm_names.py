"""The names a vLLM user reaches for work on `LLM`: `sampling_params=`, bare-string prompts,
engine keywords beside `config=`; weights written straight into the model never meet stale KV."""

from __future__ import annotations

import logging

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import char_tokenizer, random_prompts, tiny_llm, tiny_model

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


def test_generate_takes_vllms_sampling_params_keyword() -> None:
    llm = tiny_llm()
    prompts = random_prompts(2, 4, 12, seed=1)
    by_name = llm.generate(prompts, sampling_params=GREEDY)
    assert [o.outputs for o in by_name] == [o.outputs for o in llm.generate(prompts, GREEDY)]
    assert [len(o.outputs[0].token_ids) for o in by_name] == [GREEDY.max_tokens] * 2


def test_params_and_sampling_params_together_are_refused() -> None:
    with pytest.raises(ValueError, match="^sampling_params: give params or sampling_params"):
        tiny_llm().generate([[5, 6]], GREEDY, sampling_params=GREEDY)


def test_a_bare_string_prompt_keeps_its_text() -> None:
    llm = LLM(model=tiny_model(), tokenizer=char_tokenizer(), config=EngineConfig(num_blocks=64))
    (out,) = llm.generate("hello", GREEDY)
    assert out.prompt == "hello"


def test_engine_keywords_are_taken_beside_config_and_override_it() -> None:
    llm = LLM(model=tiny_model(), config=EngineConfig(num_blocks=64, seed=1), max_model_len=100, seed=3)
    assert (llm.engine.config.max_model_len, llm.engine.config.seed, llm.engine.config.num_blocks) == (
        100,
        3,
        64,
    )
    assert llm.engine.max_model_len == 100


def test_an_unknown_engine_keyword_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match="trust_remote_cod"):
        LLM(model=tiny_model(), trust_remote_cod=True)


def test_weights_written_into_the_model_directly_never_reuse_stale_prefix_blocks(caplog) -> None:
    prompt = random_prompts(1, 40, 40, seed=2)
    llm = tiny_llm(seed=0)
    llm.generate(prompt, GREEDY)  # the prompt's blocks are now in the prefix cache
    new_weights = tiny_model("llama", seed=1).state_dict()
    with torch.no_grad():
        for name, param in llm.engine.model.named_parameters():
            param.copy_(new_weights[name])
    with caplog.at_level(logging.WARNING, logger="rollout.engine.versions.direct_write_watch"):
        (after,) = llm.generate(prompt, GREEDY)
    (fresh,) = tiny_llm(seed=1).generate(prompt, GREEDY)
    assert after.outputs[0].token_ids == fresh.outputs[0].token_ids
    assert llm.weight_version == 1 and "without update_weights" in caplog.text
