"""A tiny LLaVA (CLIP tower + Llama) served exactly: logprobs equal a teacher-forced forward of the
transformers model on the processor's inputs, greedy tokens equal its `generate`, with chunks cutting
through image tokens, n samples sharing the prompt's blocks, and preemption recomputing the prompt."""

from __future__ import annotations

import torch

from rollout import LLM, EngineConfig, SamplingParams
from tests.multimodal.vlm_builders import llava_processor, random_image, reference_llava, tiny_llava


def make_llm(**config: object) -> tuple[LLM, object]:
    model = tiny_llava()
    reference = reference_llava(model)
    config = {"num_blocks": 256, "block_size": 4, **config}
    return LLM(model=model, tokenizer=llava_processor(), config=EngineConfig(**config)), reference


def teacher_forced(reference, processor, text: str, images: list, completion: list[int]) -> list[float]:
    """The model's forward on the processor's inputs + the completion. A sampled token may be the image
    placeholder id: as in `generate`'s decode steps it keeps its text embedding, so the features are put
    at the prompt's placeholders only (what the forward's masked_scatter does for the prompt)."""
    inputs = processor(images=images, text=text, return_tensors="pt")
    prompt = inputs["input_ids"]
    ids = torch.cat([prompt, torch.tensor([completion])], dim=1)
    with torch.no_grad():
        embeds = reference.get_input_embeddings()(ids)
        pixels = {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
        features = torch.cat(reference.get_image_features(**pixels).pooler_output)
        mask = torch.zeros_like(ids, dtype=torch.bool)
        mask[:, : prompt.shape[1]] = prompt == reference.config.image_token_id
        embeds[mask] = features.reshape(-1, embeds.shape[-1])
        logits = reference(inputs_embeds=embeds).logits[0].float()
    logprobs = logits.log_softmax(-1)
    start = prompt.shape[1] - 1
    return [logprobs[start + i, t].item() for i, t in enumerate(completion)]


def hf_greedy(reference, processor, text: str, images: list, max_tokens: int) -> list[int]:
    """`generate` with no stop token: the engine's ignore_eos."""
    inputs = processor(images=images, text=text, return_tensors="pt")
    reference.generation_config.eos_token_id = None
    out = reference.generate(**inputs, max_new_tokens=max_tokens, do_sample=False, pad_token_id=0)
    return out[0, inputs["input_ids"].shape[1] :].tolist()


def test_prompt_ids_equal_the_llava_processor() -> None:
    llm, _ = make_llm()
    processor, images = llava_processor(), [random_image(1), random_image(2)]
    text = "ab<image>cd<image>e"
    out = llm.generate(
        [{"prompt": text, "multi_modal_data": {"image": images}}], SamplingParams(max_tokens=1)
    )
    assert out[0].prompt_token_ids == processor(images=images, text=text)["input_ids"][0]


def test_sampled_logprobs_equal_a_teacher_forced_forward_with_chunks_through_images() -> None:
    llm, reference = make_llm(max_num_batched_tokens=5)  # every image's 4 tokens split across steps
    processor = llava_processor()
    cases = [("ab<image>cd", [random_image(1)]), ("<image>xy<image>z", [random_image(2), random_image(3)])]
    prompts = [{"prompt": text, "multi_modal_data": {"image": images}} for text, images in cases]
    params = SamplingParams(n=3, max_tokens=8, temperature=1.0, seed=0, logprobs=0, ignore_eos=True)
    outs = llm.generate(prompts, params)
    for (text, images), out in zip(cases, outs, strict=True):
        for sample in out.outputs:
            want = teacher_forced(reference, processor, text, images, sample.token_ids)
            assert max(abs(a - b) for a, b in zip(sample.token_logprobs, want, strict=True)) < 1e-4


def test_greedy_tokens_equal_transformers_generate() -> None:
    llm, reference = make_llm(max_num_batched_tokens=7)
    processor = llava_processor()
    cases = [("ab<image>cd", [random_image(4)]), ("q<image>r<image>", [random_image(5), random_image(6)])]
    prompts = [{"prompt": text, "multi_modal_data": {"image": images}} for text, images in cases]
    outs = llm.generate(prompts, SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True))
    for (text, images), out in zip(cases, outs, strict=True):
        assert out.outputs[0].token_ids == hf_greedy(reference, processor, text, images, 10)


def test_n_samples_share_one_prefill_and_one_encoder_run() -> None:
    llm, _ = make_llm(enable_prefix_caching=False)
    prompt = {"prompt": "ab<image>cd", "multi_modal_data": {"image": random_image(7)}}
    out = llm.generate([prompt], SamplingParams(n=4, max_tokens=5, temperature=1.0, seed=1))
    assert len(out[0].outputs) == 4
    assert llm.stats()["num_prompt_tokens_computed"] == len(out[0].prompt_token_ids)
    assert llm.engine.local_runner.images.num_encoder_runs == 1


def test_preemption_recomputes_image_prompts_exactly() -> None:
    text, image = "abcdefg<image>hij", random_image(8)
    prompt = {"prompt": text, "multi_modal_data": {"image": image}}
    params = SamplingParams(n=4, max_tokens=40, temperature=1.0, seed=3, logprobs=0, ignore_eos=True)
    roomy, reference = make_llm()
    want = roomy.generate([prompt], params)[0]
    tight, _ = make_llm(num_blocks=24, max_model_len=64)  # 4 samples x 14 blocks cannot all run at once
    got = tight.generate([prompt], params)[0]
    assert tight.stats()["num_preemptions"] > 0
    for a, b in zip(got.outputs, want.outputs, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs, strict=True)) < 1e-5
    sample = got.outputs[0]
    expected = teacher_forced(reference, llava_processor(), text, [image], sample.token_ids)
    assert max(abs(a - b) for a, b in zip(sample.token_logprobs, expected, strict=True)) < 1e-4


def test_token_id_prompts_take_one_placeholder_per_image() -> None:
    llm, reference = make_llm()
    processor, image = llava_processor(), random_image(9)
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    ids = processor.tokenizer("ab")["input_ids"] + [image_id] + processor.tokenizer("cd")["input_ids"]
    out = llm.generate(
        [{"prompt": ids, "multi_modal_data": {"image": image}}],
        SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True),
    )
    assert out[0].outputs[0].token_ids == hf_greedy(reference, processor, "ab<image>cd", [image], 6)
