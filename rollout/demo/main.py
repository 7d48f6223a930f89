"""`rollout demo`: a server on loopback, a GRPO trainer against it, weights pushed every round.

Everything real: the engine serves over gRPC on 127.0.0.1, the trainer talks to it only through
`RolloutClient` (generate with n samples and logprobs, update_weights over the gRPC transport), and
the policy learns from the verifiable addition reward of `rollout.tasks.addition`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rollout.assets import default_model_path
from rollout.client import RolloutClient
from rollout.config import EngineConfig
from rollout.demo import grpo, overlap, report
from rollout.engine_factory import load_engine
from rollout.gc_heap import freeze_startup_heap
from rollout.outputs import RequestOutput
from rollout.sampling_params import SamplingParams
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop
from rollout.server.weights_servicer import SERVICE_NAME, register_weight_sync
from rollout.tasks import addition

EVAL_SEED = 10_000  # held-out prompts: training rounds use seeds 0, 1, 2, ...


def run(args: argparse.Namespace, owns_process: bool = False) -> list[report.RoundStats]:
    """The whole demo for parsed `args`; returns one RoundStats per round."""
    for name in ("rounds", "prompts", "n", "eval_prompts"):
        if getattr(args, name) < 1:
            raise SystemExit(f"rollout demo: --{name.replace('_', '-')} must be >= 1")
    torch.manual_seed(args.seed)
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    path = default_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    with _local_server(path) as server, RolloutClient(server.address, timeout=120) as client:
        client.wait_until_ready(60)
        if owns_process:
            freeze_startup_heap()
        print(
            f"rollout demo: server on {server.address}, model {path.name}, "
            f"{args.rounds} rounds x {args.prompts} prompts x n={args.n}",
            flush=True,
        )
        history, wall_s = _train(args, path, tokenizer, client, overlap.synchronous)
        if args.overlap:
            print("overlapped (async) run:", flush=True)
            overlapped, async_wall_s = _train(args, path, tokenizer, client, overlap.overlapped)
    print(report.summary(history))
    if args.overlap:
        print(report.compare(history, wall_s, overlapped, async_wall_s))
    written = report.plot(history, args.plot, overlapped if args.overlap else None)
    print(f"reward curve: {written}" if written else "reward curve: install matplotlib to get the PNG")
    return history


def _local_server(path: Path) -> RolloutServer:
    engine = load_engine(path, EngineConfig(device="cpu", dtype="float32"))
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[SERVICE_NAME])
    return RolloutServer(EngineLoop(engine), host="127.0.0.1", port=0, **hooks)


def _train(
    args: argparse.Namespace,
    path: Path,
    tokenizer: PreTrainedTokenizerBase,
    client: RolloutClient,
    schedule: Callable,
) -> tuple[list[report.RoundStats], float]:
    """Trains a freshly loaded policy with `schedule` (overlap.synchronous or overlap.overlapped);
    returns the rounds and the wall time."""
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    eval_prompts = addition.make_prompts(args.eval_prompts, seed=EVAL_SEED)
    print(report.HEADER, flush=True)

    def push(in_flight: str) -> float:
        start = time.perf_counter()
        client.update_weights(model, transport="grpc", in_flight=in_flight)
        return time.perf_counter() - start

    def learn(round_: int, batch: _Batch, sync_s: float) -> report.RoundStats:
        stats = _learn(args, round_, batch, model, optimizer, tokenizer, sync_s)
        stats = dataclasses.replace(stats, accuracy=_greedy_accuracy(client, tokenizer, eval_prompts))
        print(stats.row(), flush=True)
        return stats

    start = time.perf_counter()
    history = schedule(args.rounds, push, lambda r: _generate(args, r, tokenizer, client), learn)
    return history, time.perf_counter() - start


@dataclass(frozen=True)
class _Batch:
    texts: list[str]
    outputs: list[RequestOutput]
    generate_s: float


def _generate(
    args: argparse.Namespace, round_: int, tokenizer: PreTrainedTokenizerBase, client: RolloutClient
) -> _Batch:
    """Round `round_`'s prompts, n completions each with their logprobs, on the server's weights."""
    texts = addition.make_prompts(args.prompts, seed=args.seed * 100_003 + round_)
    params = SamplingParams(n=args.n, temperature=1.0, max_tokens=8, logprobs=0, seed=args.seed + round_)
    start = time.perf_counter()
    outputs = client.generate([tokenizer(t)["input_ids"] for t in texts], params)
    return _Batch(texts, outputs, time.perf_counter() - start)


def _learn(
    args: argparse.Namespace,
    round_: int,
    batch: _Batch,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    tokenizer: PreTrainedTokenizerBase,
    sync_s: float,
) -> report.RoundStats:
    """Scores the round's completions and takes one policy-gradient step on them."""
    texts, outputs, generate_s = batch.texts, batch.outputs, batch.generate_s
    rewards = [
        [addition.reward(text, _decode(tokenizer, c.token_ids)) for c in output.outputs]
        for text, output in zip(texts, outputs, strict=True)
    ]
    start = time.perf_counter()
    drift = _step(model, optimizer, grpo.collect_samples(outputs, rewards), tokenizer.pad_token_id)
    return report.RoundStats(
        round=round_,
        weight_version=_version(outputs),
        reward=sum(map(sum, rewards)) / (len(texts) * args.n),
        accuracy=float("nan"),
        tokens_per_s=_completion_tokens(outputs) / generate_s,
        generate_s=generate_s,
        sync_s=sync_s,
        train_s=time.perf_counter() - start,
        logprob_drift=drift,
    )


def _step(
    model: PreTrainedModel, optimizer: torch.optim.Optimizer, samples: list[grpo.Sample], pad_id: int
) -> float:
    """One optimizer step on the round's samples; returns the trainer/server logprob drift."""
    if not samples:  # every group unanimous: nothing to learn this round
        return 0.0
    loss, drift = grpo.policy_loss(model, samples, pad_id)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return drift


def _greedy_accuracy(client: RolloutClient, tokenizer: PreTrainedTokenizerBase, prompts: list[str]) -> float:
    outputs = client.generate(
        [tokenizer(t)["input_ids"] for t in prompts], SamplingParams(temperature=0, max_tokens=8)
    )
    answers = [_decode(tokenizer, o.outputs[0].token_ids) for o in outputs]
    return sum(addition.reward(t, a) for t, a in zip(prompts, answers, strict=True)) / len(prompts)


def _version(outputs: list[RequestOutput]) -> int:
    """The oldest version that sampled any token of the round (the only one, when not overlapped)."""
    return min(v for o in outputs for c in o.outputs for _, v in c.weight_versions or [(0, c.weight_version)])


def _completion_tokens(outputs: list[RequestOutput]) -> int:
    return sum(len(c.token_ids) for o in outputs for c in o.outputs)


def _decode(tokenizer: PreTrainedTokenizerBase, token_ids: list[int]) -> str:
    return tokenizer.decode(token_ids, skip_special_tokens=True)
