"""Decode throughput of the server with and without stop strings (issue 30): what the detokenizer
thread costs the engine loop.

The stop strings never match, so both sides generate the same tokens; the difference is the
per-step hand-off of new tokens and the detokenizer thread's decoding, which shares the GIL with the
loop. The server runs in this process with the embedded default model (the cheapest steps: the
worst case for a fixed per-token cost). Rounds alternate, best of `--rounds` per side.

    python benchmarks/bench_stop_strings.py [--prompts 64] [--n 4] [--max-tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

from rollout import EngineConfig, SamplingParams
from rollout.assets import default_model_path
from rollout.client import RolloutClient
from rollout.engine_factory import load_engine
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop
from rollout.tasks.addition import make_prompts

NEVER = ("</answer>", "zz")  # the default model writes digits, "+", "=" and EOS only


def round_tokens_per_s(client: RolloutClient, prompts: list[str], params: SamplingParams) -> float:
    client.reset_prefix_cache()
    start = time.perf_counter()
    outputs = client.generate(prompts, params)
    elapsed = time.perf_counter() - start
    return sum(len(s.token_ids) for o in outputs for s in o.outputs) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engine = load_engine(str(default_model_path()), EngineConfig(max_num_seqs=args.prompts * args.n))
    prompts = make_prompts(args.prompts, seed=0)
    base = dict(n=args.n, max_tokens=args.max_tokens, ignore_eos=True, seed=0)
    sides = {"no stop strings": SamplingParams(**base), "2 stop strings": SamplingParams(**base, stop=NEVER)}
    best = dict.fromkeys(sides, 0.0)
    server = RolloutServer(EngineLoop(engine)).start()
    try:
        with RolloutClient(server.address) as client:
            round_tokens_per_s(client, prompts, sides["no stop strings"])  # warm-up
            for _ in range(args.rounds):
                for name, params in sides.items():
                    best[name] = max(best[name], round_tokens_per_s(client, prompts, params))
    finally:
        server.stop(grace=0.0)
    rows = args.prompts * args.n
    print(
        f"{args.prompts} prompts x n={args.n}, {args.max_tokens} tokens, {rows} rows per step, best of {args.rounds}"
    )
    for name, value in best.items():
        print(f"{name:>16}: {value:10,.0f} tokens/s")
    print(f"ratio (with / without): {best['2 stop strings'] / best['no stop strings']:.3f}")


if __name__ == "__main__":
    main()
