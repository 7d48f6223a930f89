"""Fleet benchmark on CPU: a multi-turn agent workload through one Ray Serve endpoint.

Runs N replicas of a small model (built here) and, for each mode, a fresh fleet:
  affinity     CacheAffinityRouter (sessions, cached prefixes, load)
  round_robin  the same fleet routed in turn, the baseline
  kill         affinity, one replica killed mid-run: every turn must still be answered
  push         affinity, a weight push mid-run: no sample may carry two versions
It prints one JSON line per mode: the hit rate of reusable prompt tokens (each turn's repeat of what
the turn before computed, in whole blocks), throughput, errors, samples with mixed versions.
Not a test: `python benchmarks/bench_fleet.py --replicas 2 --episodes 32 --turns 4`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import ray

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleet_workload import run_workload, save_small_model, summarize  # noqa: E402

from rollout.fleet import ServeFleet  # noqa: E402


def run_mode(mode: str, args: argparse.Namespace, model: Path) -> dict:
    serve_args = ["--model", str(model), "--served-model-name", "small", "--num-blocks", str(args.num_blocks)]
    fleet = ServeFleet(
        args.replicas,
        serve_args,
        openai_port=0,
        num_cpus=args.cpus_per_replica,
        round_robin=mode == "round_robin",
    )
    with fleet:
        fleet.wait_for_replicas()
        event = threading.Thread(target=_disrupt, args=(mode, fleet, args.disrupt_after_s), daemon=True)
        event.start()
        turns, errors, wall = run_workload(
            fleet.base_url, args.episodes, args.turns, args.max_tokens, args.concurrency, "small"
        )
        event.join()
        summary = summarize(turns, wall)
        versions = sorted({v for t in turns for v in t.versions})
    return {"mode": mode, "replicas": args.replicas, **summary, "errors": errors, "versions_seen": versions}


def _disrupt(mode: str, fleet: ServeFleet, after_s: float) -> None:
    if mode not in ("kill", "push"):
        return
    time.sleep(after_s)
    if mode == "kill":
        fleet.kill_replica(fleet.replicas()[0])
    else:
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(fleet.spec.serve_args[1])
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.01)
        print(json.dumps({"pushed_version": fleet.update_weights(model)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--num-blocks", type=int, default=2048)
    parser.add_argument("--cpus-per-replica", type=float, default=1.0)
    parser.add_argument("--disrupt-after-s", type=float, default=5.0)
    parser.add_argument("--modes", nargs="+", default=["affinity", "round_robin", "kill", "push"])
    parser.add_argument("--hidden", type=int, default=256, help="the small model's hidden size")
    parser.add_argument("--layers", type=int, default=4, help="the small model's layers")
    args = parser.parse_args()
    ray.init(num_cpus=args.replicas + 1, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        model = save_small_model(Path(tmp) / "small", args.hidden, args.layers)
        for mode in args.modes:
            print(json.dumps(run_mode(mode, args, model)), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
