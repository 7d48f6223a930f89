"""Qwen2-VL and Qwen2.5-VL served exactly: M-RoPE's 3-D positions taken from the model's get_rope_index
for the prompt (chunks cutting through images read their slice) and position + delta after it, as
`generate` decodes; image features from the unmodified model's vision tower."""

from __future__ import annotations

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.qwen_vl_builders import qwen_inputs, qwen_processor, reference_qwen_vl, tiny_qwen_vl
from tests.multimodal.vlm_builders import random_image

IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
FAMILIES = ["qwen2_vl", "qwen2_5_vl"]
CASES = [
    ("ab" + IMAGE + "cd", [random_image(0, 60, 50)]),  # 6x4 patches: 6 image tokens
    (IMAGE + "x" + IMAGE + "yz", [random_image(1), random_image(2, 56, 84)]),
]


def make_llm(family: str, **config: object) -> tuple[LLM, object]:
    model = tiny_qwen_vl(family)
    reference = reference_qwen_vl(model)
    config = {"num_blocks": 256, "block_size": 4, "max_num_batched_tokens": 7, **config}
    return LLM(model=model, tokenizer=qwen_processor(), config=EngineConfig(**config)), reference


def prompts() -> list[dict]:
    return [{"prompt": text, "multi_modal_data": {"image": images}} for text, images in CASES]


def decode_path_logprobs(reference, text: str, images: list, completion: list[int]) -> list[float]:
    """The model's logprobs of `completion` along `generate`'s path: the prompt with its images (positions
    from get_rope_index, kept as rope_deltas), then the completion on its cache, teacher-forced."""
    inputs = qwen_inputs(text, images)
    with torch.no_grad():
        first = reference(**inputs, use_cache=True)
        rest = reference(input_ids=torch.tensor([completion[:-1]]), cache=first.cache, use_cache=True)
    logits = torch.cat([first.logits[0, -1:], rest.logits[0]]).float().log_softmax(-1)
    return [logits[i, t].item() for i, t in enumerate(completion)]


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_tokens_equal_transformers_generate(family: str) -> None:
    llm, reference = make_llm(family)
    outs = llm.generate(prompts(), SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    reference.generation_config.eos_token_id = None
    for (text, images), out in zip(CASES, outs, strict=True):
        inputs = qwen_inputs(text, images)
        assert out.prompt_token_ids == inputs["input_ids"][0].tolist()
        want = reference.generate(**inputs, max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert out.outputs[0].token_ids == want[0, inputs["input_ids"].shape[1] :].tolist()


@pytest.mark.parametrize("family", FAMILIES)
def test_sampled_logprobs_equal_the_models_own(family: str) -> None:
    llm, reference = make_llm(family, max_num_batched_tokens=5)
    params = SamplingParams(n=2, max_tokens=10, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
    for (text, images), out in zip(CASES, llm.generate(prompts(), params), strict=True):
        for sample in out.outputs:
            want = decode_path_logprobs(reference, text, images, sample.token_ids)
            assert max(abs(a - b) for a, b in zip(sample.token_logprobs, want, strict=True)) < 1e-4


def test_a_second_turn_continues_the_positions() -> None:
    """Multi-turn: a prompt holding the first turn's image, answer and a new image is positioned as a whole."""
    llm, reference = make_llm("qwen2_vl")
    first_text, first_images = CASES[0]
    answer = llm.generate(prompts()[:1], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    answer_text = llm.tokenizer.decode(answer[0].outputs[0].token_ids)
    text = first_text + answer_text + "q" + IMAGE
    images = [*first_images, random_image(3)]
    inputs = qwen_inputs(text, images)
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    out = llm.generate(
        [{"prompt": inputs["input_ids"][0].tolist(), "multi_modal_data": {"image": images}}], params
    )
    reference.generation_config.eos_token_id = None
    want = reference.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert out[0].outputs[0].token_ids == want[0, inputs["input_ids"].shape[1] :].tolist()
