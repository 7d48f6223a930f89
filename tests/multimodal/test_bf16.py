"""In bf16, an image prompt's logprobs are no further from the fp32 model's than transformers' own bf16
forward is (the issue's bound: bf16 no further from fp32 than transformers' own bf16)."""

from __future__ import annotations

import torch

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.test_llava_engine import teacher_forced
from tests.multimodal.vlm_builders import llava_processor, random_image, reference_llava, tiny_llava

TEXT, IMAGES = "abc<image>de<image>f", [random_image(60), random_image(61)]


def test_bf16_is_within_transformers_own_bf16_noise() -> None:
    model = tiny_llava()
    reference = reference_llava(model)
    processor = llava_processor()
    config = EngineConfig(num_blocks=128, block_size=4, dtype="bfloat16", max_num_batched_tokens=7)
    llm = LLM(model=model, tokenizer=processor, config=config)
    prompt = {"prompt": TEXT, "multi_modal_data": {"image": IMAGES}}
    params = SamplingParams(n=4, max_tokens=16, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
    engine_gap = own_gap = 0.0
    reference_bf16 = reference_llava(reference).to(torch.bfloat16)
    for sample in llm.generate([prompt], params)[0].outputs:
        fp32 = torch.tensor(teacher_forced(reference, processor, TEXT, IMAGES, sample.token_ids))
        own = torch.tensor(teacher_forced(reference_bf16, processor, TEXT, IMAGES, sample.token_ids))
        engine_gap = max(engine_gap, (torch.tensor(sample.token_logprobs) - fp32).abs().max().item())
        own_gap = max(own_gap, (own - fp32).abs().max().item())
    assert own_gap > 0  # bf16 moves transformers' own forward: the bound is not zero
    print(f"bf16 gap to fp32: engine {engine_gap:.3g}, transformers {own_gap:.3g}")
    assert engine_gap <= 2 * own_gap, (engine_gap, own_gap)
