"""Phase d2: decode step time at batch 1 and 64 against the weight-read floor (CUDA graphs on), each with a
torch.profiler view of a few more steps (kernels per step, the top kernels: benchmarks/step_profile.py),
then, if the time box leaves room, the server against offline.

The floor is weight bytes over the copy bandwidth measured on the device (benchmarks/bench_decode_floor.py,
which prints each batch as it goes: a run the box cuts off keeps the batches it finished); the server
comparison is benchmarks/bench_server.py (a `rollout serve` process, concurrent clients), one round.
"""

from __future__ import annotations

import re

from benchmarks.gpu_suite.bench_runs import run_bench
from benchmarks.gpu_suite.report import Context, skipped, table

DECODE_GPU = [
    "--shape",
    "qwen2.5-1.5b",
    "--batch",
    "1",
    "64",
    "--context",
    "256",
    "--steps",
    "32",
    "--profile",
    "4",
]
DECODE_DRY = ["--shape", "tiny", "--batch", "1", "4", "--context", "16", "--steps", "3", "--device", "cpu"]
DECODE_DRY += ["--profile", "2"]
SERVER_GPU = ["--clients", "8", "--prompts", "64", "--n", "8", "--max-tokens", "128", "--hidden", "1024"]
SERVER_GPU += ["--layers", "16", "--rounds", "1", "--device", "cuda"]
SERVER_DRY = ["--clients", "2", "--prompts", "4", "--n", "2", "--max-tokens", "4", "--hidden", "64"]
SERVER_DRY += ["--layers", "1", "--rounds", "1", "--device", "cpu"]
SERVER_SECONDS = 35.0  # a serve process loading a 16-layer model, one round each side (estimate)
FLOOR = re.compile(r"weight-read floor ([\d.]+) ms")
PROFILE = re.compile(r"^(    \S.*(?:\n      .*)*)", re.MULTILINE)  # step_profile.py's indented block
BATCH = re.compile(r"^\s+batch\s+(\d+):\s+([\d.]+) ms/step\s+([\d.]+)x floor\s+([\d.]+) tok/s", re.MULTILINE)


def run(ctx: Context) -> tuple[dict, str]:
    decode = run_bench("bench_decode_floor.py", DECODE_DRY if ctx.dry_run else DECODE_GPU, ctx.seconds_left())
    if decode.result is None and not decode.stopped:
        decode.require("bench_decode_floor.py")
    floor = FLOOR.search(decode.stdout)
    results = {
        int(b): {"step_ms": float(ms), "x_floor": float(x), "tokens_per_s": float(tps)}
        for b, ms, x, tps in BATCH.findall(decode.stdout)
    }
    rows = [[b, r["step_ms"], float(floor[1]) if floor else "-", f"{r['x_floor']:.2f}x", r["tokens_per_s"]]
            for b, r in results.items()]  # fmt: skip
    if decode.stopped:
        rows.append(["(the rest)", skipped()])
    md = table(["batch (graphs on)", "ms/step", "floor ms", "x floor", "tokens/s"], rows)
    profiles = PROFILE.findall(decode.stdout)
    if profiles:
        md += (
            "\n\nProfiled decode steps (torch.profiler), per batch in order:\n\n```\n"
            + "\n".join(profiles)
            + "\n```"
        )
    server = (
        _server_ratio(SERVER_DRY if ctx.dry_run else SERVER_GPU, ctx) if ctx.allows(SERVER_SECONDS) else None
    )
    md += "\n\n" + table(
        ["offline tokens/s", "server tokens/s", "server / offline"],
        [list(server.values()) if server else [skipped()]],
    )
    data = {"decode": results, "floor_ms": float(floor[1]) if floor else None, "server": server}
    return data | {"log": decode.stdout[-2000:]}, md


def _server_ratio(args: list[str], ctx: Context) -> dict | None:
    bench = run_bench("bench_server.py", args, ctx.seconds_left(), json_out=False)
    found = dict(re.findall(r"^(offline LLM|gRPC server|ratio)\s*:\s*([\d.]+)", bench.stdout, re.MULTILINE))
    if bench.stopped:
        return None
    if bench.result is None or len(found) != 3:
        raise RuntimeError(f"bench_server.py broke: {bench.stdout[-1500:]}")
    return {
        "offline": float(found["offline LLM"]),
        "server": float(found["gRPC server"]),
        "ratio": float(found["ratio"]),
    }


def failed(data: dict) -> bool:
    return False  # targets (batch 1 within 1.5x of the floor, server >= 0.95x) are read in the docs
