"""Phase d2: decode step time at batch 1/64/256 against the weight-read floor, and the server against offline.

The floor is weight bytes over the copy bandwidth measured on the device (benchmarks/bench_decode_floor.py);
the server comparison is benchmarks/bench_server.py (a `rollout serve` process, concurrent clients).
"""

from __future__ import annotations

import re
import subprocess
import sys

from benchmarks.gpu_suite.phase_speed_grpo import bench_json
from benchmarks.gpu_suite.report import BENCHMARKS, Context, table

DECODE_GPU = ["--shape", "qwen2.5-1.5b", "--batch", "1", "64", "256", "--context", "256", "--steps", "32"]
DECODE_DRY = ["--shape", "tiny", "--batch", "1", "4", "--context", "16", "--steps", "3", "--device", "cpu"]
SERVER_GPU = ["--clients", "8", "--prompts", "64", "--n", "8", "--max-tokens", "128", "--hidden", "1024"]
SERVER_GPU += ["--layers", "16", "--rounds", "2", "--device", "cuda"]
SERVER_DRY = ["--clients", "2", "--prompts", "4", "--n", "2", "--max-tokens", "4", "--hidden", "64"]
SERVER_DRY += ["--layers", "1", "--rounds", "1", "--device", "cpu"]


def run(ctx: Context) -> tuple[dict, str]:
    decode = {}
    for eager in (False, True) if not ctx.dry_run else (False,):
        args = (DECODE_DRY if ctx.dry_run else DECODE_GPU) + (["--eager"] if eager else [])
        decode["eager" if eager else "cuda graphs"] = bench_json("bench_decode_floor.py", args, timeout=240)
    server = _server_ratio(SERVER_DRY if ctx.dry_run else SERVER_GPU)
    rows = []
    for mode, result in decode.items():
        floor_ms = result["weight_bytes"] / result["bandwidth"] * 1e3
        for batch, r in result["results"].items():
            rows.append([mode, batch, r["step_ms"], floor_ms, f"{r['x_floor']:.2f}x", r["tokens_per_s"]])
    md = table(["decode", "batch", "ms/step", "floor ms", "x floor", "tokens/s"], rows)
    md += "\n\n" + table(["offline tokens/s", "server tokens/s", "server / offline"], [list(server.values())])
    return {"decode": decode, "server": server}, md


def _server_ratio(args: list[str]) -> dict:
    cmd = [sys.executable, str(BENCHMARKS / "bench_server.py"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    found = dict(re.findall(r"^(offline LLM|gRPC server|ratio)\s*:\s*([\d.]+)", proc.stdout, re.MULTILINE))
    if proc.returncode != 0 or len(found) != 3:
        raise RuntimeError(
            f"bench_server.py exited {proc.returncode}: {proc.stdout[-800:]} {proc.stderr[-800:]}"
        )
    return {
        "offline": float(found["offline LLM"]),
        "server": float(found["gRPC server"]),
        "ratio": float(found["ratio"]),
    }


def failed(data: dict) -> bool:
    return False  # targets (batch 1 within 1.5x of the floor, server >= 0.95x) are read in the docs
