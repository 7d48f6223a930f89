"""Idefics3 served exactly: images split into tiles with their row/column markers and the global image,
expanded as Idefics3Processor expands them (its own prompt string), features only at the image tokens."""

from __future__ import annotations

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.idefics3_builders import idefics3_processor, tiny_idefics3
from tests.multimodal.test_llava_engine import teacher_forced
from tests.multimodal.vlm_builders import random_image, reference_of

CASES = [
    ("ab<image>cd", [random_image(1, 60, 40)]),
    ("<image>x<image>yz", [random_image(2, 20, 20), random_image(3)]),
]


class NestedImages:
    """Idefics3Processor takes one list of images per prompt."""

    def __call__(self, images: list, text: str, return_tensors: str = "pt") -> dict:
        return idefics3_processor()(images=[images], text=[text], return_tensors=return_tensors)


def test_prompt_ids_greedy_tokens_and_logprobs_equal_transformers() -> None:
    model = tiny_idefics3()
    reference = reference_of(model)
    config = EngineConfig(num_blocks=256, block_size=4, max_num_batched_tokens=5)
    llm = LLM(model=model, tokenizer=idefics3_processor(), config=config)
    prompts = [{"prompt": text, "multi_modal_data": {"image": images}} for text, images in CASES]
    greedy = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    reference.generation_config.eos_token_id = None
    for (text, images), out in zip(CASES, greedy, strict=True):
        inputs = NestedImages()(images, text)
        assert out.prompt_token_ids == inputs["input_ids"][0].tolist()
        want = reference.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert out.outputs[0].token_ids == want[0, inputs["input_ids"].shape[1] :].tolist()
    params = SamplingParams(n=2, max_tokens=8, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
    for (text, images), out in zip(CASES, llm.generate(prompts, params), strict=True):
        for sample in out.outputs:
            want = teacher_forced(reference, NestedImages(), text, images, sample.token_ids)
            assert max(abs(a - b) for a, b in zip(sample.token_logprobs, want, strict=True)) < 1e-4
