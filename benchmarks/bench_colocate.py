"""Colocated training on one machine: per GRPO step, the engine sharing the trainer's weights vs holding a copy
vs a server process (`shared` transport), and what sleep mode gives back.

Each mode runs in a fresh process (so its peak memory is its own): a fp32 Llama of the given shape is the
policy (plain SGD, so optimizer state does not drown the difference), and each step generates a round
(prompts x n samples), sleeps the engine, runs the policy's forward and backward over the round and the
optimizer step, then syncs the weights (shared: a new version over the optimizer's writes; copy:
`LLM.update_weights`; server: a push over the `shared` transport) and wakes the engine. Printed per mode:
median weight-sync, generation, training and step time, resident memory while generating and at
peak (trainer + server processes), and for sleep levels 1 and 2
the resident memory given back and the wake-up time (level 2: the weights written again included).

Usage: python benchmarks/bench_colocate.py [--hidden 512 --layers 8 --vocab 32000 --steps 3]
       python benchmarks/bench_colocate.py --hidden 896 --layers 24 --vocab 151936   # Qwen2.5-0.5B's shape
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

MODES = ("colocated-shared", "colocated-copy", "server-shared")
MB = 1 << 20

SERVER = textwrap.dedent(
    """
    import sys, torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from rollout import EngineConfig
    from rollout.engine.llm_engine import LLMEngine
    from rollout.server.app import RolloutServer
    from rollout.server.engine_loop import EngineLoop
    from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig.from_dict(eval(sys.argv[1]))).eval()
    engine = LLMEngine(model, None, EngineConfig(num_blocks=int(sys.argv[2]), max_model_len=256))
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])
    with RolloutServer(EngineLoop(engine), **hooks) as server:
        print(server.address, flush=True)
        sys.stdin.read()
    """
)


def model_config(args: argparse.Namespace) -> dict:
    heads = max(1, args.hidden // 64)
    return dict(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 11 // 4,
        num_hidden_layers=args.layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 4),
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )


def rss_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


def peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Engine:
    """One mode's generation backend: generate, sleep, wake and sync, the same calls for all three."""

    def __init__(self, mode: str, trainer: torch.nn.Module, config: dict, num_blocks: int) -> None:
        from rollout import LLM, EngineConfig
        from trainer_plugins.trl.colocated_engine import aliasing_copy

        self.mode, self.trainer, self.server = mode, trainer, None
        engine_config = EngineConfig(num_blocks=num_blocks, max_model_len=256)
        if mode == "server-shared":
            self.server = subprocess.Popen(
                [sys.executable, "-c", SERVER, repr(config), str(num_blocks)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            from rollout.client import RolloutClient

            self.client = RolloutClient(self.server.stdout.readline().strip())
            self.sync()
            return
        shared = mode == "colocated-shared"
        model = aliasing_copy(trainer) if shared else copy.deepcopy(trainer).eval().requires_grad_(False)
        self.llm = LLM(model=model, config=engine_config)
        self.llm.memory.weights_shared = shared

    @property
    def pids(self) -> list[int]:
        return [os.getpid()] + ([self.server.pid] if self.server else [])

    def generate(self, prompts: list[list[int]], params: object) -> list[list[int]]:
        outs = (self.client if self.server else self.llm).generate(prompts, params)
        return [list(o.prompt_token_ids) + list(c.token_ids) for o in outs for c in o.outputs]

    def sleep(self, level: int) -> int:
        """Returns the bytes the engine freed, by its own account."""
        return (self.client if self.server else self.llm).sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        (self.client if self.server else self.llm).wake_up(tags=tags)

    def sync(self) -> None:
        if self.server:
            self.client.update_weights(self.trainer, transport="shared")
        elif self.mode == "colocated-shared":
            self.llm.engine.commit_weight_version()
        else:
            self.llm.update_weights(self.trainer.named_parameters())

    def close(self) -> None:
        if self.server:
            self.client.close()
            self.server.stdin.close()
            self.server.wait(timeout=120)


def train_step(
    trainer: torch.nn.Module, optimizer: torch.optim.Optimizer, sequences: list[list[int]]
) -> None:
    """A GRPO-shaped update: the policy's forward and backward over the round, then the optimizer step."""
    width = max(len(s) for s in sequences)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
    logits = trainer(input_ids=ids).logits[:, :-1].float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def given_back(engine: Engine, level: int) -> tuple[float, float, float]:
    """The engine's freed bytes (its account, MB), the resident memory all processes gave back (MB), and the
    wake-up time (s) to serve again. The trainer's own freed pages are returned first, so they are not counted."""
    from rollout.engine.sleep.host_memory import give_back

    give_back(torch.device("cpu"))
    before = sum(rss_mb(pid) for pid in engine.pids)
    accounted = engine.sleep(level) / MB
    freed = before - sum(rss_mb(pid) for pid in engine.pids)

    def wake() -> None:
        engine.wake_up(["weights"])
        if level == 2 or engine.server:  # discarded weights come back with a sync
            engine.sync()
        engine.wake_up(["kv_cache"])

    return accounted, freed, timed(wake)


def run_mode(mode: str, args: argparse.Namespace) -> dict:
    from rollout import SamplingParams

    torch.set_num_threads(args.threads)
    config = model_config(args)
    torch.manual_seed(0)
    trainer = LlamaForCausalLM(LlamaConfig.from_dict(config)).train()
    optimizer = torch.optim.SGD(trainer.parameters(), lr=1e-4)
    engine = Engine(mode, trainer, config, args.num_blocks)
    params = SamplingParams(n=args.n, max_tokens=args.max_tokens, temperature=1.0, seed=0, ignore_eos=True)
    prompts = [
        [(7 * p + i) % (args.vocab - 3) + 3 for i in range(args.prompt_len)] for p in range(args.prompts)
    ]
    level = 1 if mode == "colocated-shared" else 2  # shared weights are never freed: only the KV cache
    engine.generate(prompts, params)  # warm-up: first-call costs are no step's
    times: dict[str, list[float]] = {"generate": [], "train": [], "sync": [], "step": []}
    awake: list[float] = []  # resident memory while generating (engine awake), all processes
    for _ in range(args.steps):
        start = time.perf_counter()
        sequences = engine.generate(prompts, params)
        times["generate"].append(time.perf_counter() - start)
        awake.append(sum(rss_mb(pid) for pid in engine.pids))
        engine.sleep(level)
        times["train"].append(timed(lambda rows=sequences: train_step(trainer, optimizer, rows)))
        engine.wake_up(["weights"])
        times["sync"].append(timed(engine.sync))
        engine.wake_up(["kv_cache"])
        times["step"].append(time.perf_counter() - start)
    level1 = given_back(engine, 1)
    level2 = given_back(engine, 2)
    peak = sum(peak_mb(pid) for pid in engine.pids)
    engine.close()
    medians = {f"{name}_s": statistics.median(values) for name, values in times.items()}
    return dict(mode=mode, peak_mb=peak, awake_mb=max(awake), level1=level1, level2=level2, **medians)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--num-blocks", type=int, default=512)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, in a child process
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args)), flush=True)
        return
    rows = []
    for mode in args.modes:
        child = subprocess.run([sys.executable, *sys.argv, "--mode", mode], capture_output=True, text=True)
        if child.returncode:
            sys.exit(f"{mode} failed:\n{child.stderr[-3000:]}")
        rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
    print(
        f"shape: hidden {args.hidden}, layers {args.layers}, vocab {args.vocab}; {args.prompts} prompts x {args.n}"
    )
    print("| mode | weight sync | generate | train | step | RSS generating | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['mode']} | {r['sync_s'] * 1e3:.1f} ms | {r['generate_s']:.2f} s | {r['train_s']:.2f} s | "
            f"{r['step_s']:.2f} s | {r['awake_mb']:.0f} MB | {r['peak_mb']:.0f} MB |"
        )
    print("\n| mode | level | engine frees (its account) | resident memory given back | wake-up (+ sync) |")
    print("|---|---|---|---|---|")
    for r in rows:
        for level in (1, 2):
            accounted, freed, wake = r[f"level{level}"]
            print(f"| {r['mode']} | {level} | {accounted:.0f} MB | {freed:.0f} MB | {wake * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
