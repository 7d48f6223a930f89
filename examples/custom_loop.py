"""A plain PyTorch GRPO-style policy-gradient loop on `RolloutClient`: no TRL, about 100 lines.

    python examples/custom_loop.py                      # starts `rollout serve` on a free port
    python examples/custom_loop.py --server HOST:PORT   # uses a running `rollout serve --model <same model>`
    python examples/custom_loop.py --async              # round t+1 generates while round t trains

Each round: push the policy (`update_weights`), sample a group of completions per prompt with
their logprobs (`generate` with `n`, top-p 0.95), score them with the addition reward, and take one
step of group-normalized policy gradient, with the server's logprobs as the behaviour policy. The
trainer's logprobs are those of the same processed distribution (top-p included), replayed on its own
logits by `rollout.replay.SamplerReplay`, so the importance ratio is 1 up to numerics.
With --async the server generates round t+1 while the trainer learns from round t (lag 1), and
each push lands mid-generation with `in_flight="keep"`; the per-token behaviour logprobs make the
importance ratio exact for samples that span two versions (`weight_versions` says which).
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rollout.assets import default_model_path
from rollout.client import RolloutClient
from rollout.demo import overlap
from rollout.outputs import RequestOutput
from rollout.replay import SamplerReplay
from rollout.sampling_params import SamplingParams
from rollout.tasks import addition


@contextmanager
def local_server(model_path: str, server: str | None) -> Iterator[str]:
    """Yields `server`, or starts `rollout serve` on a free loopback port and stops it afterwards."""
    if server is not None:
        yield server
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "rollout.cli", "serve", "--model", model_path, "--port", str(port)]
    process = subprocess.Popen(command)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)


def token_logprobs(
    model: PreTrainedModel,
    replay: SamplerReplay,
    prompt: list[int],
    completion: list[int],
    params: SamplingParams,
) -> torch.Tensor:
    """log p(completion token | prefix) under `model` as the server sampled it (processed), with gradient."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return replay.logprobs(logits, prompt, completion, params)


def group_advantages(rewards: list[float]) -> list[float]:
    mean = sum(rewards) / len(rewards)
    std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
    return [(r - mean) / (std + 1e-4) for r in rewards]


def policy_loss(
    model: PreTrainedModel,
    replay: SamplerReplay,
    params: SamplingParams,
    outputs: list[RequestOutput],
    texts: list[str],
    tokenizer: PreTrainedTokenizerBase,
) -> tuple[torch.Tensor, float, float]:
    """Importance-weighted policy gradient (server logprobs = behaviour policy), token-mean."""
    losses, drift, rewards = [], [], []
    for output, prompt in zip(outputs, texts, strict=True):
        completions = [tokenizer.decode(s.token_ids, skip_special_tokens=True) for s in output.outputs]
        group = [addition.digit_reward(prompt, c) for c in completions]
        rewards += group
        for sample, advantage in zip(output.outputs, group_advantages(group), strict=True):
            if not sample.token_ids:
                continue
            logp = token_logprobs(
                model, replay, list(output.prompt_token_ids), list(sample.token_ids), params
            )
            behaviour = torch.tensor(sample.token_logprobs)
            ratio = torch.exp(logp - behaviour)  # 1 up to numerics unless overlapped (--async)
            losses.append(-(ratio * advantage))
            drift.append((logp.detach() - behaviour).abs())
    loss = torch.cat(losses).mean()
    return loss, torch.cat(drift).mean().item(), sum(rewards) / len(rewards)


def transport_options(args: argparse.Namespace) -> dict[str, object]:
    """The disk transport needs a directory the server can read too; the others need nothing."""
    if args.transport != "disk":
        return {}
    if args.checkpoint_dir is None:
        args.checkpoint_dir = tempfile.mkdtemp(prefix="rollout-weights-")
        atexit.register(shutil.rmtree, args.checkpoint_dir, ignore_errors=True)  # ours: removed at exit
    return {"path": args.checkpoint_dir}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--server", help="host:port of a running rollout server (default: start one)")
    parser.add_argument("--transport", default="grpc", choices=["grpc", "distributed", "disk"])
    parser.add_argument(
        "--checkpoint-dir", help="directory both sides can read (disk transport; default: a temp dir)"
    )
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument(
        "--async", dest="overlap", action="store_true", help="overlap generation and training"
    )
    args = parser.parse_args()

    model_path = str(default_model_path())
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    params = SamplingParams(n=args.n, max_tokens=8, temperature=1.0, top_p=0.95, logprobs=0)
    with local_server(model_path, args.server) as address:
        client = RolloutClient(address)
        client.wait_until_ready(300)
        replay = SamplerReplay.for_server(client.server_info(), tokenizer)  # the server's EOS ids, vocabulary

        def push(in_flight: str) -> int:
            return client.update_weights(
                model, transport=args.transport, in_flight=in_flight, **transport_options(args)
            )

        def generate(step: int) -> tuple[list[str], list[RequestOutput]]:
            texts = addition.make_prompts(args.prompts_per_step, seed=step)
            return texts, client.generate([tokenizer(t)["input_ids"] for t in texts], params)

        def learn(step: int, batch: tuple[list[str], list[RequestOutput]], version: int) -> None:
            texts, outputs = batch
            loss, drift, reward = policy_loss(model, replay, params, outputs, texts, tokenizer)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            versions = sorted({v for o in outputs for s in o.outputs for _, v in s.weight_versions})
            print(
                f"step {step} weights v{version} sampled by v{versions} reward {reward:.3f} "
                f"|logp drift| {drift:.2e} loss {loss.item():.4f}"
            )

        schedule = overlap.overlapped if args.overlap else overlap.synchronous
        schedule(args.steps, push, generate, learn)


if __name__ == "__main__":
    main()
