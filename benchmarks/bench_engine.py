"""GRPO-shaped throughput: rollout's LLM vs transformers' baselines and the matmul floor, in one run.

Workloads: P prompts x n samples, prompt lengths uniform in [min, max], sampling at temperature 1
with the sampled token's logprob (what a GRPO trainer needs); "fixed": exactly --new tokens per
sample (ignore_eos); "variable": EOS sampled, its logit biased so lengths spread like a GRPO round
(rollout/bench/workloads.py). Systems: rollout; transformers `generate` given all rows at once (left
padding: the strongest simple baseline), `generate` per prompt, `generate_batch` (sdpa and
paged|eager); and the matmul floor: rollout's linear layers alone, timed during one of its runs.
The device is named in the output; absolute figures are only meaningful on a GPU, ratios anywhere.

    python benchmarks/bench_engine.py                      # tiny model, CPU-sized workload
    python benchmarks/bench_engine.py --shape qwen2.5-1.5b --prompts 64 --prompt-len 256 256 --new 512
"""

from __future__ import annotations

import argparse
import json
import logging

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)

from rollout.bench import side_by_side, systems
from rollout.gc_heap import freeze_startup_heap

SHAPES = {
    # name: (config class, model class, kwargs)
    "tiny": (
        Qwen2Config,
        Qwen2ForCausalLM,
        dict(
            hidden_size=256,
            intermediate_size=768,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=4096,
        ),
    ),
    # a hybrid (docs/hybrid_models.md): Gated DeltaNet layers between full-attention layers
    "qwen3-next-tiny": (
        Qwen3NextConfig,
        Qwen3NextForCausalLM,
        dict(
            hidden_size=256,
            intermediate_size=768,
            moe_intermediate_size=256,
            shared_expert_intermediate_size=256,
            num_experts=4,
            num_experts_per_tok=2,
            num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=64,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=64,
            linear_value_head_dim=64,
            vocab_size=4096,
        ),
    ),
    "qwen2.5-1.5b": (
        Qwen2Config,
        Qwen2ForCausalLM,
        dict(
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
    ),
    "llama-3.1-8b": (
        LlamaConfig,
        LlamaForCausalLM,
        dict(
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            vocab_size=128256,
            rope_theta=500000.0,
        ),
    ),
}


def build_model(shape: str, device: str, dtype: torch.dtype) -> torch.nn.Module:
    config_cls, model_cls, kwargs = SHAPES[shape]
    config = config_cls(
        **kwargs, max_position_embeddings=4096, bos_token_id=0, eos_token_id=1, pad_token_id=0
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = model_cls(config).to(dtype).eval()
    return model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, nargs=2, default=(64, 128), metavar=("MIN", "MAX"))
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--workloads", nargs="+", default=["fixed", "variable"], choices=["fixed", "variable"]
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=sorted(side_by_side.BASELINES))
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    base = build_model(args.shape, args.device, dtype)
    freeze_startup_heap()  # what every system's process would freeze (rollout/gc_heap.py)
    prompts = systems.random_prompts(args.prompts, *args.prompt_len, base.config.vocab_size)
    print(f"device: {systems.device_name(args.device)}; shape {args.shape}; {dtype}", flush=True)
    baselines = [b for b in side_by_side.BASELINES if b not in args.skip]
    reports = side_by_side.run_workloads(
        base, prompts, args.n, args.new, args.workloads, baselines, args.device, args.repeats
    )
    if args.json:
        with open(args.json, "w") as f:
            results = {k: r.to_json() for k, r in reports.items()}
            summary = {"device": systems.device_name(args.device), "args": vars(args), "workloads": results}
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    logging.getLogger("ContinuousBatchingLogger").setLevel(logging.WARNING)
    main()
