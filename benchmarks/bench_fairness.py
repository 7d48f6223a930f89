"""Head-of-line blocking: a small request's latency while another caller's large batch runs.

One client sends a large batch (`--prompts` x `--n` samples); meanwhile a second client sends a
small request (`--probe-tokens` tokens) every `--probe-interval` s until the batch is done. Both run
against an in-process server over the embedded default model, once with FIFO admission (every
queued request enters the engine at once, the behaviour before fair share) and once with fair share
(rollout/server/fair_share.py). Printed per mode: the probe latencies (p50, p95, max), the idle
latency of the same probe, and the batch's wall time and tokens/s (throughput must hold).

Usage: python benchmarks/bench_fairness.py [--prompts 256 --n 4 --max-tokens 32 --max-num-seqs 64]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

from rollout import EngineConfig, SamplingParams
from rollout.assets import default_model_path
from rollout.client import RolloutClient
from rollout.engine_factory import load_engine
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop


def run_mode(args: argparse.Namespace, fair: bool) -> dict[str, float]:
    config = EngineConfig(device="cpu", dtype="float32", max_num_seqs=args.max_num_seqs, num_blocks=2048)
    engine = load_engine(default_model_path(), config)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, engine.vocab_size, (12,), generator=g).tolist() for _ in range(args.prompts)]
    big = SamplingParams(n=args.n, max_tokens=args.max_tokens, temperature=1.0, seed=0, ignore_eos=True)
    probe = SamplingParams(max_tokens=args.probe_tokens, temperature=0.0, ignore_eos=True)
    loop = EngineLoop(engine, fair_share=fair)
    with (
        RolloutServer(loop) as server,
        RolloutClient(server.address) as batch_client,
        RolloutClient(server.address) as probe_client,
    ):
        idle = timed(lambda: probe_client.generate([[5, 6, 7]], probe))
        done = threading.Event()
        result: dict[str, float] = {}

        def batch() -> None:
            try:
                start = time.perf_counter()
                outs = batch_client.generate(prompts, big, timeout=3600)
                result["batch_s"] = time.perf_counter() - start
                result["tokens"] = sum(len(c.token_ids) for o in outs for c in o.outputs)
            finally:
                done.set()

        thread = threading.Thread(target=batch)
        thread.start()
        latencies = []
        while not done.wait(args.probe_interval):
            latencies.append(timed(lambda: probe_client.generate([[5, 6, 7]], probe, timeout=3600)))
        thread.join()
    latencies = latencies or [float("nan")]
    return {
        "idle_probe_ms": idle * 1e3,
        "probe_p50_ms": statistics.median(latencies) * 1e3,
        "probe_p95_ms": sorted(latencies)[int(0.95 * (len(latencies) - 1))] * 1e3,
        "probe_max_ms": max(latencies) * 1e3,
        "probes": len(latencies),
        "batch_s": result["batch_s"],
        "tokens_per_s": result["tokens"] / result["batch_s"],
    }


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--probe-tokens", type=int, default=4)
    parser.add_argument("--probe-interval", type=float, default=0.2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.prompts} prompts x n={args.n} x {args.max_tokens} tokens, max_num_seqs={args.max_num_seqs}")
    header = "mode   idle probe  probe p50   p95        max        probes  batch s   tokens/s"
    print(header)
    for fair in (False, True):
        r = run_mode(args, fair)
        print(
            f"{'fair' if fair else 'fifo':6} {r['idle_probe_ms']:8.0f}ms {r['probe_p50_ms']:8.0f}ms "
            f"{r['probe_p95_ms']:8.0f}ms {r['probe_max_ms']:8.0f}ms {r['probes']:6d} "
            f"{r['batch_s']:8.2f} {r['tokens_per_s']:10.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
