"""vLLM's offline inputs run on `LLM` as written: TextPrompt / TokensPrompt dicts, `lora_request=None`,
`get_tokenizer()`, `chat`'s template options with vLLM's meanings and errors; a vLLM-style `score`
call and a missing model directory get one clear line."""

from __future__ import annotations

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import CONVERSATION, tiny_model, tool_chat_tokenizer

GREEDY = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
THINKING_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if not loop.last or not continue_final_message %}"
    "</{{ m.role }}>{% endif %}{% endfor %}{% if enable_thinking %}<think>{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(model=tiny_model(seed=3), tokenizer=tool_chat_tokenizer(), config=EngineConfig(num_blocks=128))


def _tokens(outs) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outs]


def test_prompt_dicts_generate_what_strings_and_id_lists_do(llm: LLM) -> None:
    ids = llm.get_tokenizer()("abc")["input_ids"]
    plain = llm.generate(["abc", ids], GREEDY)
    dicts = llm.generate([{"prompt": "abc"}, {"prompt_token_ids": ids}], GREEDY)
    assert _tokens(dicts) == _tokens(plain)
    assert [o.prompt_token_ids for o in dicts] == [ids, ids]
    assert [o.prompt for o in dicts] == ["abc", None]


def test_a_tokens_prompt_keeps_its_text_and_a_single_dict_is_one_prompt(llm: LLM) -> None:
    (out,) = llm.generate({"prompt_token_ids": [5, 6, 7], "prompt": "xyz"}, GREEDY)
    assert (out.prompt_token_ids, out.prompt) == ([5, 6, 7], "xyz")


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        (
            {"prompt": "a", "multi_modal_data": {"image": None}},
            r"prompts\[0\]\.multi_modal_data: this model takes no",
        ),
        ({"prompt": "a", "mm_processor_kwargs": {}}, r"prompts\[0\]\.mm_processor_kwargs: not supported"),
        ({"prompt_token_ids": [5], "cache_salt": "s"}, r"prompts\[0\]\.cache_salt: per-request prefix-cache"),
        ({"prompt": "a", "promt_token_ids": [5]}, r"prompts\[0\]\.promt_token_ids: unknown prompt key"),
        ({"prompt_embeds": None}, r"prompts\[0\]\.prompt_embeds: embedding prompts"),
        ({}, r"prompts\[0\]: a prompt dict needs 'prompt'"),
        ({"prompt_token_ids": "abc"}, r"prompts\[0\]\.prompt_token_ids must be a list"),
    ],
)
def test_a_prompt_dict_key_rollout_cannot_honour_is_refused_by_name(
    llm: LLM, prompt: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        llm.generate([prompt], GREEDY)


def test_lora_request_none_is_accepted_and_an_adapter_is_refused(llm: LLM) -> None:
    assert _tokens(llm.generate([[5, 6]], GREEDY, lora_request=None)) == _tokens(
        llm.generate([[5, 6]], GREEDY)
    )
    llm.chat(CHAT[:1], GREEDY, lora_request=[None])
    with pytest.raises(ValueError, match="^lora_request: per-request LoRA adapters are not supported"):
        llm.generate([[5, 6]], GREEDY, lora_request=object())


def test_get_tokenizer_is_the_tokenizer(llm: LLM) -> None:
    assert llm.get_tokenizer() is llm.tokenizer is llm.engine.tokenizer


def test_chat_options_render_as_apply_chat_template_does(llm: LLM) -> None:
    tokenizer = tool_chat_tokenizer()
    cases = [
        (dict(add_generation_prompt=False), dict(add_generation_prompt=False)),
        (
            dict(add_generation_prompt=False, continue_final_message=True),
            dict(add_generation_prompt=False, continue_final_message=True),
        ),
        (
            dict(chat_template=THINKING_TEMPLATE, chat_template_kwargs={"enable_thinking": True}),
            dict(chat_template=THINKING_TEMPLATE, enable_thinking=True, add_generation_prompt=True),
        ),
    ]
    for ours, theirs in cases:
        (out,) = llm.chat(CHAT, GREEDY, **ours)
        text = tokenizer.apply_chat_template(CHAT, tokenize=False, **theirs)
        assert out.prompt == text
        assert out.prompt_token_ids == tokenizer(text, add_special_tokens=False)["input_ids"]
    (thinking,) = llm.chat(
        CHAT, GREEDY, chat_template=THINKING_TEMPLATE, chat_template_kwargs={"enable_thinking": 1}
    )
    assert thinking.prompt.endswith("<think><assistant>")
    (continued,) = llm.chat(CHAT, GREEDY, add_generation_prompt=False, continue_final_message=True)
    assert continued.prompt.endswith("Hello")  # the last message left open for the model to continue


def test_explicit_chat_arguments_win_over_chat_template_kwargs(llm: LLM) -> None:
    (out,) = llm.chat(CHAT[:1], GREEDY, chat_template_kwargs={"add_generation_prompt": False})
    assert out.prompt.endswith("<assistant>")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(continue_final_message=True),
            r"^Cannot set both `continue_final_message` and `add_generation_prompt` to True\.$",
        ),
        (
            dict(chat_template_kwargs={"tokenize": True}),
            "^Found unexpected chat template kwargs from request",
        ),
        (dict(chat_template_kwargs={"chat_template": "x"}), "^Found unexpected chat template kwargs"),
        (dict(add_generation_prompt="yes"), "^add_generation_prompt must be a bool"),
    ],
)
def test_conflicting_chat_options_are_refused_as_vllm_does(llm: LLM, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        llm.chat(CONVERSATION, GREEDY, **kwargs)


@pytest.mark.parametrize(
    "args", [("what is rollout?", ["a service", "a dance"]), (["q1", "q2"], ["d1", "d2"]), ([[5, 6]], ["d"])]
)
def test_a_vllm_style_cross_encoder_score_call_points_to_the_right_api(llm: LLM, args: tuple) -> None:
    with pytest.raises(ValueError, match=r"^LLM\.score here returns teacher-forced logprobs.*token_ids_list"):
        llm.score(*args)


@pytest.mark.parametrize("path", ["/missing/dir", "./no/such/model", "~/no-such-model-dir"])
def test_a_missing_model_directory_is_one_line_naming_it(path: str) -> None:
    with pytest.raises(ValueError, match=f"^model: no such directory '{path}'") as info:
        LLM(path)
    assert "\n" not in str(info.value) and "Repo id" not in str(info.value)
