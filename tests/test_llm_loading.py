"""`LLM` takes its tokenizer as an object or a path, with a path or an in-memory model alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollout import LLM, EngineConfig, SamplingParams
from rollout.assets import default_model_path

CONFIG = EngineConfig(device="cpu", dtype="float32", num_blocks=64)
GREEDY = SamplingParams(max_tokens=6, temperature=0.0)


def test_a_tokenizer_object_serves_a_model_loaded_from_a_path() -> None:
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    llm = LLM(str(default_model_path()), tokenizer=tokenizer, config=CONFIG)
    assert llm.tokenizer is tokenizer
    by_path = LLM(str(default_model_path()), config=CONFIG)
    ours, theirs = llm.generate(["12+34="], GREEDY)[0], by_path.generate(["12+34="], GREEDY)[0]
    assert ours.prompt_token_ids == tokenizer("12+34=")["input_ids"] == theirs.prompt_token_ids
    assert ours.outputs[0].token_ids == theirs.outputs[0].token_ids


def test_a_tokenizer_path_serves_an_in_memory_model() -> None:
    model = AutoModelForCausalLM.from_pretrained(default_model_path())
    llm = LLM(model=model, tokenizer=str(default_model_path()), config=CONFIG)
    assert llm.generate(["1+2="], GREEDY)[0].prompt == "1+2="


@pytest.mark.parametrize("use_path_model", [True, False])
def test_a_named_tokenizer_that_does_not_load_is_an_error_naming_tokenizer(
    tmp_path: Path, use_path_model: bool
) -> None:
    model = (
        str(default_model_path())
        if use_path_model
        else AutoModelForCausalLM.from_pretrained(default_model_path())
    )
    with pytest.raises(ValueError, match="^tokenizer: cannot load a tokenizer from"):
        LLM(model, tokenizer=str(tmp_path / "missing"), config=CONFIG)
