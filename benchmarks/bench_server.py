"""Throughput of the same workload through the gRPC server (concurrent clients) and the offline LLM.

The server must keep >= 90% of offline tokens/s with 8+ clients (issue 3). Both sides use the same
model and engine settings; the server side adds protobuf, gRPC and the engine-loop hand-off. The
server is a separate `rollout serve` process and the clients are threads of this one.

    python benchmarks/bench_server.py [--clients 8] [--prompts 64] [--n 4] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rollout import LLM, EngineConfig, SamplingParams
from rollout.client import RolloutClient


def make_model(hidden: int, layers: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1024, hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


def make_prompts(count: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(16, 65, (count,), generator=g).tolist()
    return [torch.randint(3, 1024, (n,), generator=g).tolist() for n in lengths]


def count_tokens(outputs: list) -> int:
    return sum(len(c.token_ids) for o in outputs for c in o.outputs)


def offline_round(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> float:
    llm.reset_prefix_cache()
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    return count_tokens(outputs) / (time.perf_counter() - start)


def server_round(
    client: RolloutClient, prompts: list[list[int]], params: SamplingParams, clients: int
) -> float:
    client.reset_prefix_cache()
    shards = [prompts[i::clients] for i in range(clients)]
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda shard: client.generate(shard, params), shards))
    return sum(count_tokens(r) for r in results) / (time.perf_counter() - start)


def compare(args: argparse.Namespace, config: EngineConfig, params: SamplingParams) -> tuple[float, float]:
    """Best tokens/s of each side over interleaved rounds (a shared CPU makes single runs noisy).

    The server runs as its own process (`rollout serve`, as in production), so the clients'
    protobuf work does not share a GIL with the engine loop; the offline LLM runs in this process.
    """
    prompts = make_prompts(args.prompts)
    with tempfile.TemporaryDirectory() as model_dir:
        make_model(args.hidden, args.layers).save_pretrained(model_dir)
        llm = LLM(model_dir, config=config)
        with serve(model_dir, config) as address, RolloutClient(address, timeout=600) as client:
            client.wait_until_ready(120)
            llm.generate(prompts[:8], params)  # warm-up
            client.generate(prompts[:8], params)
            rounds = [(offline_round(llm, prompts, params), server_round(client, prompts, params, args.clients))
                      for _ in range(args.rounds)]  # fmt: skip
    return max(r[0] for r in rounds), max(r[1] for r in rounds)


@contextmanager
def serve(model_dir: str, config: EngineConfig) -> Iterator[str]:
    """`rollout serve` on a free loopback port, with the offline side's engine settings."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "rollout.cli", "--log-level", "WARNING", "serve", "--model", model_dir,
               "--port", str(port), "--max-num-seqs", str(config.max_num_seqs),
               "--num-blocks", str(config.num_blocks), "--device", config.device]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())})
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds; the best of each side counts"
    )
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = EngineConfig(max_num_seqs=256, num_blocks=2048, device=args.device)
    params = SamplingParams(
        n=args.n, max_tokens=args.max_tokens, temperature=1.0, seed=0, ignore_eos=True, logprobs=0
    )
    base, via_server = compare(args, config, params)
    print(f"workload: {args.prompts} prompts x n={args.n} x {args.max_tokens} tokens, {args.clients} clients, "
          f"device {args.device}, best of {args.rounds} interleaved rounds")  # fmt: skip
    print(f"offline LLM : {base:10.1f} tokens/s")
    print(f"gRPC server : {via_server:10.1f} tokens/s")
    print(f"ratio       : {via_server / base:10.3f}")


if __name__ == "__main__":
    main()
