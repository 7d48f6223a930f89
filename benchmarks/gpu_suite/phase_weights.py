"""Phase e: weight updates on one GPU: the shared transport (CUDA IPC) against gRPC and disk, trainer and server colocated.

The server is a separate process on the same device, holding a Qwen2.5-1.5B-shaped bf16 model; this
process is the trainer. Each transport pushes the full state dict (a warm-up, then up to 3 timed: the
median); after each, a push of the same tensors with the version just set must succeed, which the server
allows only when its weights equal the trainer's bit for bit (the retry rule): the check that every byte
landed. In order of need (shared first); a transport the time box leaves no room for is marked skipped.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import torch

from benchmarks.gpu_suite.report import BENCHMARKS, Context, skipped, table
from rollout.client import RolloutClient
from rollout.client.weight_push import WeightSyncError

SERVER = textwrap.dedent(
    """
    import sys, torch
    sys.path.insert(0, sys.argv[1])
    from bench_engine import build_model
    from rollout import EngineConfig
    from rollout.engine.llm_engine import LLMEngine
    from rollout.server.app import RolloutServer
    from rollout.server.engine_loop import EngineLoop
    from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync

    shape, device, dtype = sys.argv[2], sys.argv[3], getattr(torch, sys.argv[4])
    model = build_model(shape, device, dtype)
    engine = LLMEngine(model, None, EngineConfig(device=device, num_blocks=64, max_model_len=256))
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])
    with RolloutServer(EngineLoop(engine), **hooks) as server:
        print(server.address, flush=True)
        sys.stdin.read()
    """
)


def run(ctx: Context) -> tuple[dict, str]:
    sys.path.insert(0, str(BENCHMARKS))
    from bench_engine import build_model

    shape, dtype = ("tiny", "float32") if ctx.dry_run else ("qwen2.5-1.5b", "bfloat16")
    trainer = build_model(shape, ctx.device, getattr(torch, dtype))
    with torch.no_grad():  # different weights from the server's, so every push changes something
        for param in trainer.parameters():
            param.add_(0.01)
    nbytes = sum(t.nbytes for t in trainer.state_dict().values())
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(BENCHMARKS), shape, ctx.device, dtype],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with RolloutClient(server.stdout.readline().strip()) as client, tempfile.TemporaryDirectory() as tmp:
            rows = _rows(ctx, client, trainer, tmp)
    finally:
        server.stdin.close()
        server.wait(timeout=120)
    data = {"shape": shape, "dtype": dtype, "bytes": nbytes, "transports": rows}
    md = table(
        ["transport", "seconds (median)", "timed pushes", "GB/s", "bit-exact after"],
        [
            [r["transport"], r["skipped"]] if "skipped" in r
            else [r["transport"], r["seconds"], r["pushes"], nbytes / r["seconds"] / 1e9, r["bit_exact"]]
            for r in rows
        ],
    )  # fmt: skip
    return (
        data,
        f"{shape} ({dtype}, {nbytes / 2**30:.2f} GiB), trainer and server on one {ctx.device}:\n\n{md}",
    )


def _rows(ctx: Context, client: RolloutClient, model: torch.nn.Module, tmp: str) -> list[dict]:
    pushes = {
        "shared (CUDA IPC)" if ctx.device == "cuda" else "shared (shared memory)": dict(transport="shared"),
        "grpc, 8 MiB chunks": dict(transport="grpc", chunk_bytes=8 * 2**20),
        "disk (write + load)": dict(transport="disk", path=f"{tmp}/w"),
    }
    rows, check = [], 0.0  # check: the last bit-exact check's seconds (a gRPC push)
    for name, kwargs in pushes.items():
        if not ctx.allows(2 * check):  # no room for a warm-up and the check
            rows.append({"transport": name, "skipped": skipped()})
            continue
        first = _timed(ctx.device, client, model, kwargs)[0]  # warm-up (first share, connections)
        if not ctx.allows(first + check):
            rows.append({"transport": name, "skipped": skipped(), "warm_up_seconds": first})
            continue
        times, version = [], 0
        while len(times) < 3 and (not times or ctx.allows(times[-1] + check)):
            seconds, version = _timed(ctx.device, client, model, kwargs)
            times.append(seconds)
        start = time.perf_counter()
        exact = _serving_equals(client, model, version)
        check = time.perf_counter() - start
        rows.append(
            {"transport": name, "seconds": statistics.median(times), "pushes": len(times), "bit_exact": exact}
        )
    return rows


def _timed(device: str, client: RolloutClient, model: torch.nn.Module, kwargs: dict) -> tuple[float, int]:
    _sync(device)
    start = time.perf_counter()
    version = client.update_weights(model, **kwargs)
    return time.perf_counter() - start, version


def _serving_equals(client: RolloutClient, model: torch.nn.Module, version: int) -> bool:
    """The server accepts the current version again only when the tensors equal what it serves."""
    try:
        return client.update_weights(model, transport="grpc", version=version) == version
    except WeightSyncError:
        return False


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def failed(data: dict) -> bool:
    return not all(row["bit_exact"] for row in data["transports"] if "skipped" not in row)
