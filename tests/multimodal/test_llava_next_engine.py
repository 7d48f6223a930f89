"""LLaVA-NeXT served exactly: images of several sizes tiled at any resolution, the processor's token count
(unpadded grid + image_newline rows + the base tile) reproduced, features from the model's own packing."""

from __future__ import annotations

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.test_llava_engine import hf_greedy, teacher_forced
from tests.multimodal.vlm_builders import llava_next_processor, random_image, reference_of, tiny_llava_next

CASES = [
    ("ab<image>cd", [random_image(1, 40, 30)]),
    ("<image>x<image>yz", [random_image(2, 30, 60), random_image(3, 50, 50)]),
]


def make_llm(**config: object):
    model = tiny_llava_next()
    reference = reference_of(model)
    config = {"num_blocks": 256, "block_size": 4, "max_num_batched_tokens": 7, **config}
    return LLM(model=model, tokenizer=llava_next_processor(), config=EngineConfig(**config)), reference


def prompts() -> list[dict]:
    return [{"prompt": text, "multi_modal_data": {"image": images}} for text, images in CASES]


def test_prompt_ids_and_greedy_tokens_equal_transformers() -> None:
    llm, reference = make_llm()
    processor = llava_next_processor()
    outs = llm.generate(prompts(), SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    for (text, images), out in zip(CASES, outs, strict=True):
        assert out.prompt_token_ids == processor(images=images, text=text)["input_ids"][0]
        assert out.outputs[0].token_ids == hf_greedy(reference, processor, text, images, 8)


def test_sampled_logprobs_equal_a_teacher_forced_forward() -> None:
    llm, reference = make_llm(max_num_batched_tokens=5)
    processor = llava_next_processor()
    params = SamplingParams(n=2, max_tokens=8, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
    for (text, images), out in zip(CASES, llm.generate(prompts(), params), strict=True):
        for sample in out.outputs:
            want = teacher_forced(reference, processor, text, images, sample.token_ids)
            assert max(abs(a - b) for a, b in zip(sample.token_logprobs, want, strict=True)) < 1e-4
