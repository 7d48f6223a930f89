"""vLLM's `tokenization_kwargs` on `LLM.generate` and `LLM.chat` (rollout/inputs/tokenization_kwargs.py):
the prompt ids equal transformers' tokenizer called with vLLM's encode keywords (renderers/params.py
get_encode_kwargs: add_special_tokens, truncation, max_length), token-id prompts are truncated on the
tokenizer's truncation_side, and a prompt over max_length or an unknown key is refused before anything
is generated."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import tiny_model, tool_chat_tokenizer

ONE = SamplingParams(max_tokens=1, temperature=0.0)
TEXT = "Hello there General Kenobi"
CHAT = [{"role": "user", "content": "What is the weather in Paris"}]


def _llm(truncation_side: str = "right") -> LLM:
    tokenizer = tool_chat_tokenizer()
    tokenizer.truncation_side = truncation_side
    return LLM(model=tiny_model("llama", seed=3), tokenizer=tokenizer, config=EngineConfig(num_blocks=128))


def _ids(text: str, truncation_side: str = "right", **kwargs: object) -> list[int]:
    tokenizer = tool_chat_tokenizer()
    tokenizer.truncation_side = truncation_side
    return tokenizer(text, **kwargs)["input_ids"]


@pytest.mark.parametrize(
    ("kwargs", "encode"),
    [
        ({"add_special_tokens": False}, {"add_special_tokens": False}),
        ({"truncation": True, "max_length": 6}, {"truncation": True, "max_length": 6}),
        ({"truncation": "longest_first", "max_length": 6}, {"truncation": True, "max_length": 6}),
        ({"truncate_prompt_tokens": 5}, {"truncation": True, "max_length": 5}),
        (
            {"truncate_prompt_tokens": 5, "add_special_tokens": False},
            {"truncation": True, "max_length": 5, "add_special_tokens": False},
        ),
        ({"truncation": False, "truncate_prompt_tokens": 4}, {"truncation": True, "max_length": 4}),
    ],
)
@pytest.mark.parametrize("side", ["right", "left"])
def test_text_prompt_ids_equal_the_tokenizer_called_with_vllms_keywords(
    kwargs: dict, encode: dict, side: str
) -> None:
    (out,) = _llm(side).generate([TEXT], ONE, tokenization_kwargs=dict(kwargs))
    assert out.prompt_token_ids == _ids(TEXT, side, **encode)
    assert out.prompt == TEXT


def test_without_tokenization_kwargs_the_prompt_is_whole_with_special_tokens() -> None:
    (out,) = _llm().generate([TEXT], ONE)
    assert out.prompt_token_ids == _ids(TEXT) and len(out.prompt_token_ids) == len(TEXT) + 1


def test_do_lower_case_lowers_the_text_before_tokenizing() -> None:
    (out,) = _llm().generate([TEXT], ONE, tokenization_kwargs={"do_lower_case": True})
    assert out.prompt_token_ids == _ids(TEXT.lower())


@pytest.mark.parametrize(("side", "kept"), [("right", slice(0, 3)), ("left", slice(-3, None))])
def test_token_prompts_are_truncated_on_the_tokenizers_side(side: str, kept: slice) -> None:
    ids = [5, 6, 7, 8, 9, 10]
    (out,) = _llm(side).generate(
        [{"prompt_token_ids": ids}], ONE, tokenization_kwargs={"truncate_prompt_tokens": 3}
    )
    assert out.prompt_token_ids == ids[kept]


def test_padding_to_max_length_appends_the_pad_token() -> None:
    kwargs = {"padding": "max_length", "max_length": 40, "add_special_tokens": False}
    (out,) = _llm().generate(["Hi"], ONE, tokenization_kwargs=kwargs)
    assert out.prompt_token_ids == _ids("Hi", add_special_tokens=False) + [0] * 38


def test_needs_detokenization_gives_a_token_prompt_its_text() -> None:
    ids = _ids("Hello")
    (out,) = _llm().generate([ids], ONE, tokenization_kwargs={"needs_detokenization": True})
    assert out.prompt == tool_chat_tokenizer().decode(ids) and out.prompt_token_ids == ids  # vLLM's decode
    assert _llm().generate([ids], ONE)[0].prompt is None


def test_chat_adds_no_special_tokens_and_truncates_the_rendered_text_as_vllm() -> None:
    tokenizer = tool_chat_tokenizer()
    text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    llm = _llm()
    (plain,) = llm.chat(CHAT, ONE, tokenization_kwargs={})
    assert plain.prompt_token_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    (cut,) = llm.chat(CHAT, ONE, tokenization_kwargs={"truncation": True, "max_length": 7})
    assert (
        cut.prompt_token_ids
        == tokenizer(text, add_special_tokens=False, truncation=True, max_length=7)["input_ids"]
    )
    assert cut.prompt == text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_length": 6}, "prompt tokens, more than tokenization_kwargs allow"),
        ({"return_tensors": "pt"}, "tokenization_kwargs.return_tensors"),
        ({"truncation": "only_second"}, "tokenization_kwargs.truncation"),
        ({"truncate_prompt_tokens": 9, "max_length": 6}, "tokenization_kwargs.truncate_prompt_tokens"),
        ({"max_length": 10_000}, "tokenization_kwargs.max_length"),
        ({"add_special_tokens": "yes"}, "tokenization_kwargs.add_special_tokens"),
    ],
)
def test_a_refused_setting_names_its_field_and_generates_nothing(kwargs: dict, field: str) -> None:
    llm = _llm()
    with pytest.raises(ValueError, match=field):
        llm.generate(["Hi", TEXT], ONE, tokenization_kwargs=kwargs)
    assert llm.stats()["num_requests_finished"] == 0 and llm.stats()["num_waiting_seqs"] == 0
