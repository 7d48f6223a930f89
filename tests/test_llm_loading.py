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


def model_dir_without_a_usable_tokenizer(tmp_path: Path) -> Path:
    """The embedded model's weights plus a tokenizer_config.json naming a class transformers lacks."""
    AutoModelForCausalLM.from_pretrained(default_model_path()).save_pretrained(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "NoSuchTokenizerClass"}')
    return tmp_path


@pytest.mark.parametrize(
    "error", [None, ImportError("needs the sentencepiece package"), TypeError("bad arg")]
)
def test_a_model_directory_whose_tokenizer_fails_to_load_serves_token_ids_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, error: Exception | None
) -> None:
    path = model_dir_without_a_usable_tokenizer(tmp_path)
    if error is not None:

        def fail(*args: object, **kwargs: object) -> None:
            raise error

        monkeypatch.setattr(AutoTokenizer, "from_pretrained", fail)
    with caplog.at_level("WARNING"):
        llm = LLM(str(path), config=CONFIG)
    assert llm.tokenizer is None
    assert "serving token ids only" in caplog.text
    reference = LLM(str(default_model_path()), config=CONFIG).generate([[5, 6, 7]], GREEDY)[0]
    assert llm.generate([[5, 6, 7]], GREEDY)[0].outputs[0].token_ids == reference.outputs[0].token_ids
    with pytest.raises(ValueError, match="no tokenizer"):
        llm.generate(["1+2="], GREEDY)


def test_generate_takes_one_sampling_params_per_prompt_as_vllm_does() -> None:
    llm = LLM(config=CONFIG)
    prompts = ["12+34=", "5+6=", "70+8="]
    params = [
        SamplingParams(max_tokens=3, temperature=0.0),
        SamplingParams(n=2, max_tokens=5, temperature=1.0, seed=7),
        SamplingParams(max_tokens=4, temperature=0.7, top_k=-1, seed=3),
    ]
    together = llm.generate(prompts, params)
    alone = [llm.generate([prompt], p)[0] for prompt, p in zip(prompts, params, strict=True)]
    assert [[c.token_ids for c in o.outputs] for o in together] == [
        [c.token_ids for c in o.outputs] for o in alone
    ]
    assert [len(o.outputs) for o in together] == [1, 2, 1]
    with pytest.raises(ValueError, match="^params: 2 SamplingParams for 3 prompts"):
        llm.generate(prompts, params[:2])


def test_the_offline_llm_refuses_a_text_too_long_for_the_context_before_tokenizing() -> None:
    llm = LLM(config=CONFIG)
    text = "1" * (llm.max_prompt_chars + 1)
    with pytest.raises(ValueError, match=rf"^prompts\[0\]: {len(text)} characters, more than the"):
        llm.generate([text], GREEDY)


def test_vllm_engine_keywords_load_a_model_from_a_path() -> None:
    llm = LLM(
        str(default_model_path()), max_model_len=64, dtype="float32", seed=3, device="cpu", num_blocks=64
    )
    assert (llm.engine.max_model_len, llm.engine.model_info.dtype, llm.engine.config.seed) == (
        64,
        "float32",
        3,
    )
    assert len(llm.generate("1+2=", GREEDY)[0].outputs[0].token_ids) > 0
