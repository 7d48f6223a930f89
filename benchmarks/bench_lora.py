"""LoRA RL weight sync: adapter-only pushes vs pushes of the merged weights, and what serving costs.

For a Qwen2.5-0.5B-shaped model (random weights, fp32, CPU) with a rank-r LoRA adapter on every
linear layer (PEFT's "all-linear"): bytes and seconds per gRPC push to a server process, adapter
only (the server merges it into its kept base) vs the merged weights; the server's own apply time
for each (in process, no transfer); and generation speed of the two ways a server could hold the
adapter: merged into the weights (what rollout does) vs PEFT's unmerged LoRA modules run as they are.

Usage: python benchmarks/bench_lora.py [--ranks 8 64 --layers 24 --repeats 3 --threads 2]
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

from rollout import LLM, EngineConfig, SamplingParams
from rollout.client import RolloutClient
from rollout.weights.lora_export import peft_update
from rollout.weights.manifest import Manifest, unique_named_tensors

SERVER = textwrap.dedent(
    """
    import sys, torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from rollout import EngineConfig
    from rollout.engine.llm_engine import LLMEngine
    from rollout.server.app import RolloutServer
    from rollout.server.engine_loop import EngineLoop
    from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync

    torch.set_num_threads(int(sys.argv[2]))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config.from_dict(eval(sys.argv[1]))).eval()
    engine = LLMEngine(model, None, EngineConfig(num_blocks=64, max_model_len=256, self_check=False))
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])
    with RolloutServer(EngineLoop(engine), **hooks) as server:
        print(server.address, flush=True)
        sys.stdin.read()
    """
)


def qwen_config(layers: int) -> dict:
    """Qwen2.5-0.5B's shape (494M parameters at 24 layers)."""
    return dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=layers,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )


def base_model(config: dict) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config.from_dict(config)).eval()


def peft_policy(config: dict, rank: int):
    model = get_peft_model(
        base_model(config), LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear")
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)  # a trained adapter: B is no longer zero
    return model


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def push_rows(config: dict, ranks: list[int], args: argparse.Namespace) -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, repr(config), str(args.threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with RolloutClient(server.stdout.readline().strip()) as client:
            print("| push (gRPC, server process) | rank | MB | s (median) |")
            print("| --- | --- | --- | --- |")
            for rank in ranks:
                policy = peft_policy(config, rank)
                merged = copy.deepcopy(policy).merge_and_unload().state_dict()
                adapter, _ = peft_update(policy)
                for label, source, named in (
                    ("merged weights", merged, list(merged.items())),
                    ("adapter only", policy, adapter),
                ):
                    mb = Manifest.of(unique_named_tensors(named)).nbytes / 1e6  # tied weights travel once
                    seconds = median_seconds(lambda s=source: client.update_weights(s), args.repeats)
                    print(f"| {label} | {rank} | {mb:.1f} | {seconds:.2f} |")
                del merged
    finally:
        server.stdin.close()
        server.wait(timeout=60)


def apply_and_generation_rows(config: dict, ranks: list[int], args: argparse.Namespace) -> None:
    engine_config = dict(num_blocks=128, max_model_len=256, self_check=False)
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    prompts = [[(7 * i + j) % 1000 + 10 for j in range(args.prompt_len)] for i in range(args.batch)]
    served = LLM(model=base_model(config), config=EngineConfig(**engine_config))
    print("\n| server apply (in process, no transfer) | rank | s (median) |")
    print("| --- | --- | --- |")
    speeds = []
    for rank in ranks:
        policy = peft_policy(config, rank)
        merged = copy.deepcopy(policy).merge_and_unload().state_dict()
        # timings only: a merged push then adapter pushes is the mix a trainer must not make (the adapter
        # would merge into merged weights); both engines below serve the same dense computation anyway
        full = median_seconds(lambda m=merged: served.update_weights(m), args.repeats)
        adapter = median_seconds(lambda p=policy: served.update_weights(p), args.repeats)
        print(
            f"| merged weights | {rank} | {full:.2f} |\n| adapter only (merge into kept base) | {rank} | {adapter:.2f} |"
        )
        unmerged = LLM(model=policy.base_model.model, config=EngineConfig(**engine_config))
        for label, llm in (("merged into the weights", served), ("PEFT modules, unmerged", unmerged)):
            llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=2))  # warm up
            seconds = median_seconds(lambda llm=llm: llm.generate(prompts, params), args.repeats)
            speeds.append((label, rank, args.batch * args.max_tokens / seconds))
        del unmerged, policy, merged
    print(
        f"\n| generation ({args.batch} prompts x {args.prompt_len} tokens, {args.max_tokens} new) | rank | tokens/s |"
    )
    print("| --- | --- | --- |")
    for label, rank, speed in speeds:
        print(f"| {label} | {rank} | {speed:.1f} |")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = qwen_config(args.layers)
    params = sum(p.numel() for p in base_model(config).parameters())
    print(f"{params / 1e6:.0f}M parameters, fp32, {args.threads} threads, {cpu_name()}")
    push_rows(config, args.ranks, args)
    apply_and_generation_rows(config, args.ranks, args)


if __name__ == "__main__":
    main()
