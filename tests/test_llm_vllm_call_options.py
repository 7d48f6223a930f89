"""vLLM's other `LLM.generate` / `LLM.chat` arguments: `priority` (rollout schedules first come, first served,
vLLM's default "fcfs": zeros run, anything else is refused as vLLM refuses it, with nothing generated),
`use_tqdm` as a tqdm factory, `mm_processor_kwargs` (none), and `LLM.chat`'s arguments in vLLM's order."""

from __future__ import annotations

import inspect

import pytest
from tqdm import tqdm

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import tiny_model, tool_chat_tokenizer

ONE = SamplingParams(max_tokens=2, temperature=0.0)
PROMPTS = [[5, 6, 7], [8, 9]]
# vLLM's LLM.chat parameters, in order (vllm/entrypoints/llm.py).
VLLM_CHAT = [
    "messages",
    "sampling_params",
    "use_tqdm",
    "lora_request",
    "chat_template",
    "chat_template_content_format",
    "add_generation_prompt",
    "continue_final_message",
    "tools",
    "chat_template_kwargs",
    "tokenization_kwargs",
    "mm_processor_kwargs",
]


def _llm() -> LLM:
    return LLM(
        model=tiny_model("llama", seed=3),
        tokenizer=tool_chat_tokenizer(),
        config=EngineConfig(num_blocks=128),
    )


def test_zero_priorities_generate_what_no_priority_does() -> None:
    llm = _llm()
    plain = llm.generate(PROMPTS, ONE)
    zeros = llm.generate(PROMPTS, ONE, priority=[0, 0])
    assert [o.outputs[0].token_ids for o in zeros] == [o.outputs[0].token_ids for o in plain]


@pytest.mark.parametrize(
    ("priority", "match"),
    [
        ([0, 1], r"priority\[1\]: got priority 1 but priority scheduling is not enabled"),
        ([0], r"priority: 1 values for 2 prompts"),
        ([0, "1"], r"priority\[1\] must be an integer"),
        (0, "priority must be a list"),
    ],
)
def test_other_priorities_are_refused_and_nothing_is_generated(priority: object, match: str) -> None:
    llm = _llm()
    with pytest.raises(ValueError, match=match):
        llm.generate(PROMPTS, ONE, priority=priority)
    assert llm.stats()["num_requests_finished"] == 0 and llm.stats()["num_waiting_seqs"] == 0


def test_use_tqdm_may_be_a_progress_bar_factory() -> None:
    made = []

    def factory(*args: object, **kwargs: object) -> tqdm:
        made.append(kwargs["total"])
        return tqdm(*args, **kwargs)

    _llm().generate(PROMPTS, ONE, use_tqdm=factory)
    assert made == [2]


def test_mm_processor_kwargs_none_is_accepted_and_a_setting_refused_by_name() -> None:
    llm = _llm()
    messages = [{"role": "user", "content": "hi"}]
    assert len(llm.chat(messages, ONE, mm_processor_kwargs=None)) == 1
    with pytest.raises(ValueError, match="mm_processor_kwargs"):
        llm.chat(messages, ONE, mm_processor_kwargs={"max_pixels": 64})


def test_chat_takes_vllms_arguments_in_vllms_order() -> None:
    names = list(inspect.signature(LLM.chat).parameters)[1:]
    positional = names[: len(VLLM_CHAT)]
    assert positional == [
        "messages",
        "params",
        *VLLM_CHAT[2:],
    ]  # rollout's `params` is vLLM's sampling_params
    tokenizer = tool_chat_tokenizer()
    messages = [{"role": "user", "content": "hi"}]
    (out,) = _llm().chat(
        messages, ONE, False, None, None, None, False, True
    )  # ...continue_final_message=True
    assert out.prompt == tokenizer.apply_chat_template(messages, continue_final_message=True, tokenize=False)
