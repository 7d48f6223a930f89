"""Phase d1: a GRPO-shaped round (Qwen2.5-1.5B-shaped, bf16, 32 prompts x n=8, 256 in, 256 out) against transformers.

Runs benchmarks/bench_engine.py in a subprocess (its own memory): rollout, transformers `generate` given
every row at once, and `generate_batch` (sdpa). A quarter of the full round (64 x 8, 512 out: docs/
benchmarks.md) so it fits call 2 of a 15-minute lease; still 256 rows in flight, the GRPO batch regime.
`generate` per prompt and `generate_batch` with paged|eager attention are left out on the GPU (and
`generate_batch` in the dry run: 30 s on a CPU for 16 tokens, its own harness idling). If the box
cuts the script off, the systems it finished (it prints each as it goes) are reported, the rest marked.
"""

from __future__ import annotations

import re

from benchmarks.gpu_suite.bench_runs import run_bench
from benchmarks.gpu_suite.report import Context, skipped, table

SKIP = ["--skip", "generate", "generate_batch_eager"]
GPU_ARGS = ["--shape", "qwen2.5-1.5b", "--prompts", "32", "--n", "8", "--prompt-len", "256", "256"]
GPU_ARGS += ["--new", "256", "--workloads", "fixed", "--repeats", "1", *SKIP]
DRY_ARGS = ["--shape", "tiny", "--prompts", "2", "--n", "2", "--prompt-len", "8", "8", "--new", "4"]
DRY_ARGS += ["--workloads", "fixed", "--repeats", "1", "--device", "cpu", *SKIP, "generate_batch"]
SYSTEMS = {  # bench_engine's printed label -> its JSON name
    "rollout LLM.generate": "rollout",
    "transformers generate, all rows at once (left padding)": "generate_static",
    "transformers generate_batch (sdpa)": "generate_batch",
}
LINE = re.compile(r"^\s+(?P<label>.+?)\s+(?P<tokens>\d+)\s+(?P<seconds>[\d.]+)\s+(?P<rate>[\d.]+)\s*\S*$")


def run(ctx: Context) -> tuple[dict, str]:
    args = DRY_ARGS if ctx.dry_run else GPU_ARGS
    bench = run_bench("bench_engine.py", args, ctx.seconds_left())
    if bench.result is None and not bench.stopped:
        bench.require("bench_engine.py")  # raises with the script's output
    results = (
        _printed(bench.stdout) if bench.result is None else bench.result["workloads"]["fixed"]["results"]
    )
    rows = []
    rollout = results.get("rollout", {}).get("tokens_per_s")
    for name in SYSTEMS.values():
        if name not in results:
            rows.append([name, skipped() if bench.stopped else "left out (--skip)"])
            continue
        r = results[name]
        ratio = "-" if name == "rollout" or rollout is None else f"{rollout / r['tokens_per_s']:.2f}x"
        rows.append([name, r["tokens"], r["seconds"], r["tokens_per_s"], ratio])
    data = {"args": args, "results": results, "stopped": bench.stopped}
    data["log"] = bench.stdout[-3000:]
    return data, table(["system", "tokens", "seconds", "tokens/s", "rollout is"], rows)


def _printed(stdout: str) -> dict:
    """The systems a cut-off run printed (label, tokens, seconds, tokens/s)."""
    found = {}
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match and match["label"] in SYSTEMS:
            tokens, seconds, rate = int(match["tokens"]), float(match["seconds"]), float(match["rate"])
            found[SYSTEMS[match["label"]]] = dict(tokens=tokens, seconds=seconds, tokens_per_s=rate)
    return found


def failed(data: dict) -> bool:
    return False  # the targets (>= 10x generate_batch) are read in the docs, not enforced here
