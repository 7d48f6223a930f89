"""Phase d1: the GRPO shape (Qwen2.5-1.5B-shaped, 64 prompts x n=8, 256 in, 512 out, bf16) against transformers.

Runs benchmarks/bench_engine.py in a subprocess (its own memory, its own JSON): rollout, transformers
`generate_batch` with sdpa and with paged|eager attention, and `generate` given every row at once.
`generate` one call per prompt is left out on the GPU: 64 sequential calls of 512 steps do not fit a
9-minute call beside the rest (the dry run keeps it, so its code path stays alive).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.gpu_suite.report import BENCHMARKS, Context, table

GPU_ARGS = [
    "--shape",
    "qwen2.5-1.5b",
    "--prompts",
    "64",
    "--n",
    "8",
    "--prompt-len",
    "256",
    "256",
    "--new",
    "512",
]
GPU_ARGS += ["--workloads", "fixed", "--repeats", "1", "--skip", "generate"]
DRY_ARGS = ["--shape", "tiny", "--prompts", "2", "--n", "2", "--prompt-len", "8", "8", "--new", "4"]
DRY_ARGS += ["--workloads", "fixed", "--repeats", "1", "--device", "cpu"]


def run(ctx: Context) -> tuple[dict, str]:
    data = bench_json("bench_engine.py", DRY_ARGS if ctx.dry_run else GPU_ARGS)
    rows = []
    for workload, report in data["workloads"].items():
        results = report["results"]
        rollout = results["rollout"]["tokens_per_s"]
        for name, result in results.items():
            ratio = "-" if name == "rollout" else f"{rollout / result['tokens_per_s']:.2f}x"
            rows.append([workload, name, result["tokens"], result["seconds"], result["tokens_per_s"], ratio])
    return data, table(["workload", "system", "tokens", "seconds", "tokens/s", "rollout is"], rows)


def bench_json(script: str, args: list[str], timeout: int = 520) -> dict:
    """Runs benchmarks/<script> with `--json` into a temporary file and returns what it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(BENCHMARKS / script), *args, "--json", str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not path.exists():
            raise RuntimeError(f"{script} exited {proc.returncode}: {proc.stderr[-1500:]}")
        return json.loads(path.read_text())


def failed(data: dict) -> bool:
    return False  # the targets (>= 10x generate_batch) are read in the docs, not enforced here
