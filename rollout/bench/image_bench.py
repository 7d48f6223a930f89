"""`rollout bench --model <image-text model>`: images/s and output tokens/s of GRPO-shaped image prompts
(each prompt one random picture, n samples of exactly `new` tokens), rollout beside transformers'
`generate` on the same processor inputs (one call per prompt, `num_return_sequences=n`).

The prompts are the processor's own: the model's chat template over one image part and a short question
when it has one, else its image placeholder and the question.
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText

from rollout import LLM, EngineConfig, SamplingParams
from rollout.bench import systems
from rollout.multimodal.processor_parts import load_processor


def run(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=dtype).to(device).eval()
    processor = load_processor(args.model)
    new = args.new or 32
    images = [_picture(i) for i in range(args.prompts)]
    text = _prompt_text(processor)
    print(f"device: {systems.device_name(device)}; model {args.model}; {dtype}; {args.prompts} prompts x "
          f"n={args.n}, one image each, exactly {new} new tokens", flush=True)  # fmt: skip
    engine = _rollout(copy.deepcopy(model), processor, text, images, args.n, new, device)
    results = {"rollout": systems.measure(engine, args.repeats)}
    systems.release_device_memory()
    results["generate"] = systems.measure(
        _generate(model, processor, text, images, args.n, new), args.repeats
    )
    for name, result in results.items():
        images_per_s = args.prompts / result.seconds
        print(f"{name:>9}: {images_per_s:8.2f} images/s  {result.tokens_per_s:10.1f} tokens/s  "
              f"({result.seconds:.2f} s)", flush=True)  # fmt: skip
    return 0


def _rollout(model, processor, text: str, images: list, n: int, new: int, device: str) -> systems.System:
    llm = LLM(model=model, tokenizer=processor, config=EngineConfig(device=device, max_num_seqs=max(256, n)))
    prompts = [{"prompt": text, "multi_modal_data": {"image": image}} for image in images]
    params = SamplingParams(n=n, max_tokens=new, temperature=1.0, ignore_eos=True, logprobs=0)

    def run() -> int:
        return sum(len(c.token_ids) for o in llm.generate(prompts, params) for c in o.outputs)

    return run


def _generate(model, processor, text: str, images: list, n: int, new: int) -> systems.System:
    inputs = [_processed(processor, text, image, model.device) for image in images]

    def run() -> int:
        total = 0
        for given in inputs:
            width = given["input_ids"].shape[1]
            out = model.generate(**given, num_return_sequences=n, do_sample=True, max_new_tokens=new,
                                 min_new_tokens=new, output_logits=True, return_dict_in_generate=True)  # fmt: skip
            total += out.sequences[:, width:].numel()
        return total

    return run


def _processed(processor, text: str, image: Image.Image, device: torch.device) -> dict[str, torch.Tensor]:
    """What transformers' own call takes: the composite processor's output, or its two parts'."""
    if callable(processor):
        return processor(images=image, text=text, return_tensors="pt").to(device)
    raise SystemExit("rollout bench: this model's processor cannot be built whole; its baseline needs it")


def _prompt_text(processor) -> str:
    tokenizer = getattr(processor, "tokenizer", processor)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]}]
    if getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None):
        return (processor if hasattr(processor, "apply_chat_template") else tokenizer).apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
    return f"{getattr(processor, 'image_token', '<image>')}Describe it."


def _picture(seed: int) -> Image.Image:
    pixels = np.random.RandomState(seed).randint(0, 256, (224, 224, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB")
