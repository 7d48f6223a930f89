"""Weight-sync time per transport for one model, side by side in one run.

The trainer is this process; the server is a separate process (as in production) holding the same
architecture. Each transport pushes the full state dict to it `--repeats` times; the median
end-to-end time (manifest, transfer, commit on the engine loop, version bump) and the throughput
are printed per transport. The in-process row (`LLM.update_weights`, no transfer) is the floor.

Usage: python benchmarks/bench_weight_sync.py [--hidden 512 --layers 8 --vocab 32000 --repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable

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


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(args: argparse.Namespace) -> list[tuple[str, float]]:
    config = model_config(args)
    torch.manual_seed(1)
    trainer_model = LlamaForCausalLM(LlamaConfig.from_dict(config)).eval()
    rows = [("in-process copy (floor)", in_process_seconds(config, trainer_model, args.repeats))]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, repr(config), str(args.threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with RolloutClient(server.stdout.readline().strip()) as client, tempfile.TemporaryDirectory() as tmp:
            rows += push_rows(client, trainer_model, tmp, args.repeats)
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    return rows


def in_process_seconds(config: dict, model: torch.nn.Module, repeats: int) -> float:
    """LLM.update_weights in the trainer's own process: validation and copies, no transfer."""
    llm = LLM(
        model=LlamaForCausalLM(LlamaConfig.from_dict(config)).eval(), config=EngineConfig(num_blocks=64)
    )
    return timed(lambda: llm.update_weights(model.state_dict()), repeats)


def push_rows(
    client: RolloutClient, model: torch.nn.Module, tmp: str, repeats: int
) -> list[tuple[str, float]]:
    rows = []
    for chunk_mib in (2, 8):
        chunk_bytes = chunk_mib * 2**20
        push = lambda chunk_bytes=chunk_bytes: client.update_weights(model, "grpc", chunk_bytes=chunk_bytes)  # noqa: E731
        rows.append((f"grpc stream, {chunk_mib} MiB chunks", timed(push, repeats)))
    start = time.perf_counter()
    client.weight_pusher.init_group(timeout_s=120)
    rows.append(("distributed: group setup (once)", time.perf_counter() - start))
    rows.append(
        (
            "distributed gloo, 256 MiB buckets",
            timed(lambda: client.update_weights(model, "distributed"), repeats),
        )
    )
    rows.append(
        ("disk: write + load", timed(lambda: client.update_weights(model, "disk", path=f"{tmp}/w"), repeats))
    )
    model.save_pretrained(f"{tmp}/pre")
    rows.append(
        (
            "disk: load only (pre-written)",
            timed(lambda: client.update_weights(None, "disk", path=f"{tmp}/pre"), repeats),
        )
    )
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
    print(f"{'transport':<36} {'seconds':>8} {'MB/s':>8}")
    for name, seconds in run(args):
        rate = "" if "setup" in name else f"{megabytes / seconds:8.0f}"
        print(f"{name:<36} {seconds:8.3f} {rate:>8}")


if __name__ == "__main__":
    main()
