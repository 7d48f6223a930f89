"""Mistral 3 served exactly: Pixtral's row layout ([IMG] tokens, [IMG_BREAK] per row, [IMG_END]) expanded as
its processor expands it, features only at the [IMG] tokens, images of several sizes in one prompt."""

from __future__ import annotations

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.pixtral_builders import pixtral_inputs, pixtral_processor, tiny_mistral3
from tests.multimodal.test_llava_engine import teacher_forced
from tests.multimodal.vlm_builders import random_image, reference_of

CASES = [
    ("ab[IMG]cd", [random_image(1, 60, 40)]),
    ("[IMG]x[IMG]yz", [random_image(2, 30, 90), random_image(3)]),
]


class PixtralOracle:
    """The processor's call for `teacher_forced`: what PixtralProcessor would return."""

    def __call__(self, images: list, text: str, return_tensors: str = "pt") -> dict:
        return pixtral_inputs(text, images)


def test_prompt_ids_greedy_tokens_and_logprobs_equal_transformers() -> None:
    model = tiny_mistral3()
    reference = reference_of(model)
    config = EngineConfig(num_blocks=256, block_size=4, max_num_batched_tokens=5)
    llm = LLM(model=model, tokenizer=pixtral_processor(), config=config)
    prompts = [{"prompt": text, "multi_modal_data": {"image": images}} for text, images in CASES]
    greedy = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    reference.generation_config.eos_token_id = None
    for (text, images), out in zip(CASES, greedy, strict=True):
        inputs = pixtral_inputs(text, images)
        assert out.prompt_token_ids == inputs["input_ids"][0].tolist()
        want = reference.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=0)
        assert out.outputs[0].token_ids == want[0, inputs["input_ids"].shape[1] :].tolist()
    params = SamplingParams(n=2, max_tokens=8, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
    for (text, images), out in zip(CASES, llm.generate(prompts, params), strict=True):
        for sample in out.outputs:
            want = teacher_forced(reference, PixtralOracle(), text, images, sample.token_ids)
            assert max(abs(a - b) for a, b in zip(sample.token_logprobs, want, strict=True)) < 1e-4
