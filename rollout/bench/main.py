"""`rollout bench`: output tokens/s of a GRPO-shaped workload; with --compare, transformers too.

With no --model it runs the embedded default model (short prompts: its context is 64 tokens), so it
works offline on any machine. Ratios are meaningful anywhere; absolute figures only on a GPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from rollout.assets import default_model_path
from rollout.bench import systems

COMPARABLE = ("generate_batch", "generate")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollout bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="Hugging Face model directory (default: the embedded model)")
    parser.add_argument("--prompts", type=int, default=64, help="prompts (default 64)")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (default 8)")
    parser.add_argument("--prompt-len", type=int, nargs=2, metavar=("MIN", "MAX"), help="prompt token range")
    parser.add_argument("--new", type=int, help="new tokens per sample (default 32, or 64 with --model)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is reported")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compare", nargs="*", choices=COMPARABLE, default=[], help="also run these")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.WARNING)  # transformers' per-run chatter
    for name in ("prompts", "n", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"rollout bench: --{name} must be >= 1")
    lo, hi = args.prompt_len or ((8, 16) if args.model is None else (64, 128))
    new = args.new or (32 if args.model is None else 64)
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(args.model or default_model_path(), dtype=dtype).to(
        args.device
    )
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and hi + new > limit:
        raise SystemExit(
            f"rollout bench: --prompt-len max + --new = {hi + new} exceeds the model's context {limit}"
        )
    prompts = systems.random_prompts(args.prompts, lo, hi, model.config.vocab_size)
    print(
        f"device: {systems.device_name(args.device)}; model {args.model or 'embedded default'}; "
        f"{args.prompts} prompts x n={args.n}, prompt {lo}-{hi} tokens, {new} new tokens, {dtype}",
        flush=True,
    )
    results = _run_all(args, model, prompts, new)
    if args.json:
        args.json.write_text(
            json.dumps({k: vars(v) | {"tokens_per_s": v.tokens_per_s} for k, v in results.items()})
        )
    return 0


def _run_all(args: argparse.Namespace, model: torch.nn.Module, prompts: list[list[int]], new: int) -> dict:
    workloads = {"rollout": systems.rollout_engine(copy.deepcopy(model), prompts, args.n, new, args.device)}
    if "generate_batch" in args.compare:
        workloads["generate_batch"] = systems.generate_batch(
            copy.deepcopy(model), prompts, args.n, new, "sdpa"
        )
    if "generate" in args.compare:
        workloads["generate"] = systems.generate(copy.deepcopy(model), prompts, args.n, new)
    results = {}
    for name, run in workloads.items():
        results[name] = result = systems.measure(run, args.repeats)
        print(
            f"  {name:16s} {result.tokens:7d} tokens {result.seconds:8.2f} s {result.tokens_per_s:10.1f} tok/s"
        )
    ours = results["rollout"].tokens_per_s
    for name, result in results.items():
        if name != "rollout":
            print(f"  rollout / {name}: {ours / result.tokens_per_s:.2f}x")
    return results
