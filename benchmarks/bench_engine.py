"""GRPO-shaped throughput: rollout's LLM vs transformers' generate_batch and generate, in one run.

Workload: P prompts x n samples, prompt lengths uniform in [min, max], a fixed number of new tokens
(ignore_eos), sampling at temperature 1 with the sampled token's logprob (what a GRPO trainer needs).
Prints output tokens/s per system and the ratios. The device is named in the output; absolute
figures are only meaningful on a GPU, ratios on any machine.

    python benchmarks/bench_engine.py                      # tiny model, CPU-sized workload
    python benchmarks/bench_engine.py --shape qwen2.5-1.5b --prompts 64 --prompt-len 256 256 --new 512
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from collections.abc import Callable

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.generation import ContinuousBatchingConfig

from rollout import LLM, EngineConfig, SamplingParams

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


def make_prompts(count: int, lo: int, hi: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(lo, hi + 1, (count,), generator=g).tolist()
    return [torch.randint(2, vocab, (n,), generator=g).tolist() for n in lengths]


def run_rollout(model, prompts, n: int, new: int, device: str) -> Callable[[], int]:
    llm = LLM(model=model, config=EngineConfig(max_num_seqs=max(256, len(prompts) * n), device=device))
    params = SamplingParams(n=n, max_tokens=new, temperature=1.0, ignore_eos=True, logprobs=0, seed=None)

    def go() -> int:
        outs = llm.generate(prompts, params)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    return go


def run_generate_batch(model, prompts, n: int, new: int, attn: str) -> Callable[[], int]:
    model.set_attn_implementation(attn)
    gen = GenerationConfig(
        max_new_tokens=new,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        num_return_sequences=n,
        eos_token_id=-1,
        pad_token_id=0,
    )
    cb = ContinuousBatchingConfig(return_logprobs=True)

    def go() -> int:
        outs = model.generate_batch(
            prompts, generation_config=gen, continuous_batching_config=cb, progress_bar=False
        )
        return sum(len(o.generated_tokens) for o in outs.values())

    return go


def run_generate(model, prompts, n: int, new: int) -> Callable[[], int]:
    model.set_attn_implementation("sdpa")

    def go() -> int:
        total = 0
        for prompt in prompts:  # one call per prompt: padding a mixed-length batch would change the workload
            ids = torch.tensor([prompt], device=model.device)
            out = model.generate(
                ids,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=True,
                top_k=0,
                num_return_sequences=n,
                pad_token_id=0,
                output_logits=True,
                return_dict_in_generate=True,
            )
            torch.log_softmax(torch.stack(out.logits).float(), -1)  # the logprobs a trainer needs
            total += (out.sequences.shape[1] - len(prompt)) * n
        return total

    return go


def measure(fn: Callable[[], int], repeats: int) -> tuple[float, int]:
    fn()  # warm-up: allocation, first-call overheads
    times, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), tokens


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
    parser.add_argument("--skip", nargs="*", default=[], choices=["generate", "generate_batch"])
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    base = build_model(args.shape, args.device, dtype)
    prompts = make_prompts(args.prompts, *args.prompt_len, base.config.vocab_size)
    systems: dict[str, Callable[[], int]] = {
        "rollout": run_rollout(copy.deepcopy(base), prompts, args.n, args.new, args.device)
    }
    if "generate_batch" not in args.skip:
        for attn in ("sdpa", "paged|eager"):
            systems[f"generate_batch[{attn}]"] = run_generate_batch(
                copy.deepcopy(base), prompts, args.n, args.new, attn
            )
    if "generate" not in args.skip:
        systems["generate"] = run_generate(copy.deepcopy(base), prompts, args.n, args.new)
    device_name = (
        torch.cuda.get_device_name()
        if args.device.startswith("cuda")
        else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    )
    print(
        f"device: {device_name}; shape {args.shape}; {args.prompts} prompts x n={args.n}, prompt {args.prompt_len[0]}-{args.prompt_len[1]} tokens, {args.new} new tokens, {dtype}"
    )
    results = {}
    for name, fn in systems.items():
        seconds, tokens = measure(fn, args.repeats)
        results[name] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}
        print(
            f"  {name:28s} {tokens:7d} tokens  {seconds:8.2f} s  {tokens / seconds:10.1f} tok/s", flush=True
        )
    ours = results["rollout"]["tokens_per_s"]
    for name, result in results.items():
        if name != "rollout":
            print(f"  rollout / {name}: {ours / result['tokens_per_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name, "args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
