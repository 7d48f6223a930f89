"""Weight-sync time and peak memory per transport for one model, side by side in one run.

The trainer is this process; the server is a separate process (as in production) holding the same
architecture. Each transport pushes the full state dict to it `--repeats` times; the median
end-to-end time (manifest, transfer, commit on the engine loop, version bump), the throughput and
the peak rise of each process's private memory (RssAnon, sampled every 2 ms: what the transfer
allocates; shared-memory pages the trainer already owns are not new memory) are printed per
transport. The in-process row (`LLM.update_weights`, no transfer) is the floor.

Usage: python benchmarks/bench_weight_sync.py [--hidden 512 --layers 8 --vocab 32000 --repeats 3]
       python benchmarks/bench_weight_sync.py --hidden 1024 --layers 24 --vocab 96000   # ~0.5B params
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rollout import LLM, EngineConfig
from rollout.client import RolloutClient

SERVER = textwrap.dedent(
    """
    import sys, torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from rollout import EngineConfig
    from rollout.engine.llm_engine import LLMEngine
    from rollout.server.app import RolloutServer
    from rollout.server.engine_loop import EngineLoop
    from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync

    torch.set_num_threads(int(sys.argv[2]))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig.from_dict(eval(sys.argv[1]))).eval()
    engine = LLMEngine(model, None, EngineConfig(num_blocks=64, max_model_len=256))
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])
    with RolloutServer(EngineLoop(engine), **hooks) as server:
        print(server.address, flush=True)
        sys.stdin.read()
    """
)


def model_config(args: argparse.Namespace) -> dict:
    return dict(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 11 // 4,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=args.hidden // 64,
        max_position_embeddings=512,
    )


Row = tuple[str, float, float, float]  # name, seconds, server and trainer peak private-memory rise (MB)


def rss_anon_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def peak_rise(pids: list[int]) -> Iterator[list[float]]:
    """Samples each process's RssAnon every 2 ms; yields a list that holds each peak rise (MB) after."""
    base = [rss_anon_mb(pid) for pid in pids]
    peaks = list(base)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            for i, pid in enumerate(pids):
                peaks[i] = max(peaks[i], rss_anon_mb(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    rises: list[float] = []
    try:
        yield rises
    finally:
        done.set()
        thread.join()
        rises += [peak - b for peak, b in zip(peaks, base, strict=True)]


def timed(name: str, fn: Callable[[], object], repeats: int, pids: list[int]) -> Row:
    times = []
    with peak_rise(pids) as rises:
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return (name, statistics.median(times), *rises)


def run(args: argparse.Namespace) -> list[Row]:
    config = model_config(args)
    torch.manual_seed(1)
    trainer_model = LlamaForCausalLM(LlamaConfig.from_dict(config)).eval()
    rows = [in_process_row(config, trainer_model, args.repeats)]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, repr(config), str(args.threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with RolloutClient(server.stdout.readline().strip()) as client, tempfile.TemporaryDirectory() as tmp:
            rows += push_rows(client, trainer_model, tmp, args.repeats, [server.pid, os.getpid()])
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    return rows


def in_process_row(config: dict, model: torch.nn.Module, repeats: int) -> Row:
    """LLM.update_weights in the trainer's own process: validation and copies, no transfer."""
    llm = LLM(
        model=LlamaForCausalLM(LlamaConfig.from_dict(config)).eval(), config=EngineConfig(num_blocks=64)
    )
    row = timed(
        "in-process copy (floor)", lambda: llm.update_weights(model.state_dict()), repeats, [os.getpid()]
    )
    return (*row[:3], float("nan"))


def push_rows(
    client: RolloutClient, model: torch.nn.Module, tmp: str, repeats: int, pids: list[int]
) -> list[Row]:
    rows = []
    for chunk_mib in (2, 8):
        push = lambda c=chunk_mib * 2**20: client.update_weights(model, "grpc", chunk_bytes=c)  # noqa: E731
        rows.append(timed(f"grpc stream, {chunk_mib} MiB chunks", push, repeats, pids))
    start = time.perf_counter()
    client.weight_pusher.init_group(timeout_s=120)
    rows.append(("distributed: group setup (once)", time.perf_counter() - start, 0.0, 0.0))
    push = lambda: client.update_weights(model, "distributed")  # noqa: E731
    rows.append(timed("distributed gloo, 256 MiB buckets", push, repeats, pids))
    push = lambda: client.update_weights(model, "disk", path=f"{tmp}/w")  # noqa: E731
    rows.append(timed("disk: write + load", push, repeats, pids))
    model.save_pretrained(f"{tmp}/pre")
    push = lambda: client.update_weights(None, "disk", path=f"{tmp}/pre")  # noqa: E731
    rows.append(timed("disk: load only (pre-written)", push, repeats, pids))
    push = lambda: client.update_weights(model, "shared")  # noqa: E731
    rows.append(timed("shared: first push (moves into shm)", push, 1, pids))
    rows.append(timed("shared memory (steady state)", push, repeats, pids))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=3)
    # 1 by default: on a small shared machine, intra-op threads waiting on each other dominate copies
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads in each process")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = LlamaForCausalLM(LlamaConfig.from_dict(model_config(args)))
    num_params = sum(p.numel() for p in model.parameters())
    megabytes = sum(t.nbytes for t in model.state_dict().values()) / 1e6
    del model
    print(
        f"model: Llama {num_params / 1e6:.1f}M params, fp32, {megabytes:.0f} MB state dict; CPU, "
        f"{args.threads} torch thread(s) per process; server in a separate process"
    )
    print(f"{'transport':<36} {'seconds':>8} {'MB/s':>8} {'server +MB':>10} {'trainer +MB':>11}")
    for name, seconds, server_mb, trainer_mb in run(args):
        rate = "" if "setup" in name else f"{megabytes / seconds:8.0f}"
        print(f"{name:<36} {seconds:8.3f} {rate:>8} {server_mb:10.0f} {trainer_mb:11.0f}")


if __name__ == "__main__":
    main()
