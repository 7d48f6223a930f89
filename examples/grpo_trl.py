"""GRPO with TRL on the embedded default model; rollouts come from a `rollout` server. Runs on CPU.

    python examples/grpo_trl.py                      # starts `rollout serve` on a free port, trains, stops it
    python examples/grpo_trl.py --server HOST:PORT   # uses a running `rollout serve --model <same model>`

The only rollout-specific lines are `RolloutGRPOTrainer` (instead of `GRPOTrainer`) and
`rollout_config=RolloutConfig(...)`; everything else is a plain TRL GRPO script.
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

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig

from rollout.assets import default_model_path
from rollout.tasks import addition
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer


def addition_reward(prompts: list[str], completions: list[str], **_: object) -> list[float]:
    """Shaped verifiable reward: the fraction of the sum's digits the completion gets right."""
    return [addition.digit_reward(p, c) for p, c in zip(prompts, completions, strict=True)]


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
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--output-dir", default="grpo_trl_out")
    args = parser.parse_args()

    model_path = str(default_model_path())
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    prompts = addition.make_prompts(args.steps * args.prompts_per_step, seed=0)
    config = GRPOConfig(
        output_dir=args.output_dir,
        per_device_train_batch_size=args.num_generations * args.prompts_per_step,
        num_generations=args.num_generations,
        max_completion_length=8,
        max_steps=args.steps,
        learning_rate=args.learning_rate,
        temperature=1.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=False,
        use_cpu=True,
    )
    with local_server(model_path, args.server) as address:
        trainer = RolloutGRPOTrainer(
            model,
            addition_reward,
            config,
            train_dataset=Dataset.from_dict({"prompt": prompts}),
            processing_class=tokenizer,
            rollout_config=RolloutConfig(
                server=address, transport=args.transport, transport_options=transport_options(args)
            ),
        )
        trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    print(f"mean reward: first step {rewards[0]:.3f}, last step {rewards[-1]:.3f}")


if __name__ == "__main__":
    main()
