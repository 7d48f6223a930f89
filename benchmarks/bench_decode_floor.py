"""Decode step time against the weight-read floor: how close one decode step gets to reading every weight once.

A decode step must read all weights (and the batch's KV) from memory at least once, so
`floor = weight bytes / measured memory bandwidth` bounds its time from below. Batch 1 is pure
weight-read bound (issue 7 target: within 1.5x of the floor on a GPU); batch 256 shows how much the
step time grows once the batch shares that read. Bandwidth is measured here, with a device-to-device
copy, not taken from a spec sheet. On CPU the script runs too (tiny shapes), for the harness only.

    python benchmarks/bench_decode_floor.py --shape qwen2.5-1.5b --batch 1 256      # on a GPU
    python benchmarks/bench_decode_floor.py --shape tiny --batch 1 16 --context 64   # CPU smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from bench_engine import SHAPES, build_model
from step_profile import profile_steps

from rollout import LLM, EngineConfig, SamplingParams
from rollout.bench import systems


def memory_bandwidth(device: str, megabytes: int = 1024, repeats: int = 10) -> float:
    """Bytes/s of a large device copy (read + write counted), median of `repeats`."""
    src = torch.empty(megabytes * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() / statistics.median(times[1:])


def decode_step_time(
    llm: LLM, batch: int, context: int, steps: int, vocab: int, profiled: int = 0
) -> tuple[float, str]:
    """Median wall time of one engine step once `batch` sequences of `context` tokens all decode, and
    (with `profiled` > 0) a profile of that many more decode steps."""
    params = SamplingParams(max_tokens=steps + profiled + 8, temperature=1.0, ignore_eos=True, logprobs=0)
    engine = llm.engine
    for i, prompt in enumerate(systems.random_prompts(batch, context, context, vocab, seed=batch)):
        engine.add_request(f"b{batch}-{i}", prompt, params)
    computed = engine.stats()["num_prompt_tokens_computed"]
    while engine.stats()["num_prompt_tokens_computed"] < computed + batch * context:  # (chunked) prefill
        engine.step()
    for _ in range(3):  # warm-up decode steps (first graph replays, allocator)
        engine.step()
    times = []
    for _ in range(steps):
        _sync(llm.engine.model_info.device)
        start = time.perf_counter()
        engine.step()
        _sync(llm.engine.model_info.device)
        times.append(time.perf_counter() - start)
    profiled_steps = (
        profile_steps(engine.step, profiled, str(llm.engine.model_info.device)) if profiled else ""
    )
    while engine.has_unfinished_requests():
        engine.step()
    return statistics.median(times), profiled_steps


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--context", type=int, default=256, help="prompt tokens per sequence")
    parser.add_argument("--steps", type=int, default=32, help="timed decode steps per batch size")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--eager", action="store_true", help="no CUDA graphs (EngineConfig.enforce_eager)")
    parser.add_argument("--profile", type=int, default=0, help="profile this many more steps per batch")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    model = build_model(args.shape, args.device, dtype)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = memory_bandwidth(args.device)
    floor = weight_bytes / bandwidth
    config = EngineConfig(
        device=args.device,
        max_num_seqs=max(args.batch),
        max_num_batched_tokens=max(4096, args.context),
        enforce_eager=args.eager,
    )
    llm = LLM(model=model, config=config)
    print(
        f"device: {systems.device_name(args.device)}; shape {args.shape} {dtype}; weights {weight_bytes / 2**30:.2f} GiB; "
        f"measured bandwidth {bandwidth / 1e9:.0f} GB/s; weight-read floor {floor * 1e3:.3f} ms; "
        f"context {args.context}; cuda graphs {'off' if args.eager or args.device == 'cpu' else 'on'}"
    )
    results = {}
    for batch in args.batch:
        step, profiled = decode_step_time(
            llm, batch, args.context, args.steps, model.config.vocab_size, args.profile
        )
        results[batch] = {"step_ms": step * 1e3, "x_floor": step / floor, "tokens_per_s": batch / step}
        print(
            f"  batch {batch:4d}: {step * 1e3:9.3f} ms/step  {step / floor:6.2f}x floor  {batch / step:10.0f} tok/s"
        )
        if profiled:
            print(profiled, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            payload = {"weight_bytes": weight_bytes, "bandwidth": bandwidth, "results": results}
            json.dump({"args": vars(args), **payload}, f, indent=2)


if __name__ == "__main__":
    main()
