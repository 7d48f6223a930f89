"""`rollout bench`: output tokens/s of GRPO-shaped workloads, side by side with transformers' baselines
and the matmul floor (rollout's linear layers alone), on fixed and on variable lengths.

With no --model it runs the embedded default model (short prompts: its context is 64 tokens), so it
works offline on any machine. Ratios are meaningful anywhere; absolute figures only on a GPU.
"""

from __future__ import annotations

import argparse
import json
import logging

import torch
from transformers import AutoModelForCausalLM

from rollout.assets import default_model_path
from rollout.bench import image_bench, side_by_side, systems
from rollout.engine.vision.vision_model import takes_images
from rollout.gc_heap import freeze_startup_heap


def run(args: argparse.Namespace, owns_process: bool = False) -> int:
    """The benchmark for `args` as bench/command.py parsed and checked them. `owns_process`: run as a program
    (`rollout bench`), not by code that keeps the process."""
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.WARNING)  # transformers' per-run chatter
    if args.model is not None and takes_images(args.model):  # images/s beside generate (image_bench.py)
        return image_bench.run(args)
    lo, hi = args.prompt_len or ((8, 16) if args.model is None else (64, 128))
    new = args.new or (32 if args.model is None else 64)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(args.model or default_model_path(), dtype=dtype).to(
        args.device
    )
    if owns_process:  # before any system is built: every one runs in a process with a frozen start-up
        freeze_startup_heap()
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and hi + new > limit:
        raise SystemExit(
            f"rollout bench: --prompt-len max + --new = {hi + new} exceeds the model's context {limit}"
        )
    prompts = systems.random_prompts(args.prompts, lo, hi, model.config.vocab_size)
    print(
        f"device: {systems.device_name(args.device)}; model {args.model or 'embedded default'}; {dtype}",
        flush=True,
    )
    reports = side_by_side.run_workloads(
        model, prompts, args.n, new, args.workloads, args.compare, args.device, args.repeats
    )
    if args.json:
        args.json.write_text(json.dumps({k: r.to_json() for k, r in reports.items()}, indent=2))
    return 0
