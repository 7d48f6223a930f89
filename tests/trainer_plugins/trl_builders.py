"""Builders for the TRL plugin tests: a tiny Llama with a character tokenizer, a dataset, a server.

Everything is made from scratch in a temporary directory (no hub download), small enough that a
GRPO step on 2 CPU cores takes well under a second.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from trl import GRPOConfig

from rollout import EngineConfig
from rollout.engine_factory import load_engine
from rollout.server.app import RolloutServer
from rollout.server.engine_loop import EngineLoop
from rollout.server.weights_servicer import SERVICE_NAME as WEIGHTS_SERVICE
from rollout.server.weights_servicer import register_weight_sync
from tests.serve_process import announced_address, start_serve, stop_server
from trainer_plugins.trl import RolloutConfig, RolloutGRPOTrainer

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARS = list("0123456789+= abcdefghijklmnopqrstuvwxyz:,.")


def make_tokenizer(chars: list[str] = CHARS) -> PreTrainedTokenizerFast:
    """One token per character; unknown characters map to <unk>. Another `chars` order: another
    tokenizer with the same vocabulary size."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def make_model(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, vocab_size: int | None = None, **overrides: object
) -> LlamaForCausalLM:
    """`overrides`: LlamaConfig settings that differ from the tiny defaults (rope, activation, tying...)."""
    torch.manual_seed(seed)
    settings = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    config = LlamaConfig(
        vocab_size=vocab_size or len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **{**settings, **overrides},
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_model_dir(path: Path, seed: int = 0, **overrides: object) -> Path:
    tokenizer = make_tokenizer()
    make_model(tokenizer, seed, **overrides).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def make_dataset(num_prompts: int = 8) -> Dataset:
    return Dataset.from_dict({"prompt": [f"{i}+{i + 1}=" for i in range(num_prompts)]})


def length_reward(completions: list[str], **_: object) -> list[float]:
    """Any reward with variance works for plumbing tests; shorter completions score higher."""
    return [-float(len(c)) for c in completions]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir: Path, port: int, log_path: Path, *extra: str) -> subprocess.Popen:
    """`rollout serve` of `model_dir` (plus `extra` flags) as a child process; stop it with `stop_server`."""
    return start_serve(["--model", str(model_dir), "--port", str(port), *extra], log_path)


def wait_for_exit_or(process: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)


@contextlib.contextmanager
def serving_model(tmp_path: Path, *extra: str, seed: int = 1, **overrides: object) -> Iterator[str]:
    """A `rollout serve` child hosting a fresh tiny model with config `overrides`; yields its address."""
    model_dir = save_model_dir(tmp_path / f"served_{seed}_{len(list(tmp_path.iterdir()))}", seed, **overrides)
    log_path = model_dir.with_suffix(".log")
    process = start_server(model_dir, 0, log_path, *extra)
    try:
        yield announced_address(process, log_path)
    finally:
        stop_server(process)


def in_process_server(model_dir: Path, port: int = 0) -> RolloutServer:
    """A started server of `model_dir` in this process (seconds, not a child's tens of seconds under
    load): restarting one on the same port is a new server process as clients see it (a new boot id)."""
    engine = load_engine(str(model_dir), EngineConfig())
    hooks = dict(extra_servicers=[register_weight_sync], extra_service_names=[WEIGHTS_SERVICE])
    return RolloutServer(EngineLoop(engine), port=port, **hooks).start()


def grpo_args(tmp_path: Path, max_steps: int = 2, **overrides: object) -> GRPOConfig:
    """A CPU GRPOConfig small enough for a step in about a second."""
    settings = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=max_steps,
        learning_rate=5e-2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        bf16=False,
        use_cpu=True,
        seed=0,
    )
    return GRPOConfig(**{**settings, **overrides})


def logged(trainer: object, metric: str) -> list[float]:
    """One value of a TRL metric per logged training step."""
    return [h[metric] for h in trainer.state.log_history if "loss" in h]


def make_trainer(args: GRPOConfig, address: str, **rollout: object) -> RolloutGRPOTrainer:
    """A trainer of the tiny policy with the length reward against `address` (RolloutConfig fields in
    `rollout`)."""
    tokenizer = make_tokenizer()
    return RolloutGRPOTrainer(
        make_model(tokenizer, seed=0),
        length_reward,
        args,
        train_dataset=make_dataset(),
        processing_class=tokenizer,
        rollout_config=RolloutConfig(server=address, **{"wait_timeout": 120, **rollout}),
    )
