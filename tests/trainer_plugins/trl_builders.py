"""Builders for the TRL plugin tests: a tiny Llama with a character tokenizer, a dataset, a server.

Everything is made from scratch in a temporary directory (no hub download), small enough that a
GRPO step on 2 CPU cores takes well under a second.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from tests.serve_process import start_serve

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
CHARS = list("0123456789+= abcdefghijklmnopqrstuvwxyz:,.")


def make_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; unknown characters map to <unk>."""
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def make_model(
    tokenizer: PreTrainedTokenizerFast, seed: int = 0, vocab_size: int | None = None
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size or len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save_model_dir(path: Path, seed: int = 0) -> Path:
    tokenizer = make_tokenizer()
    make_model(tokenizer, seed).save_pretrained(path)
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


def start_server(model_dir: Path, port: int, log_path: Path) -> subprocess.Popen:
    """`rollout serve` of `model_dir` as a child process; the caller stops it with `stop_server`."""
    return start_serve(["--model", str(model_dir), "--port", str(port)], log_path)


def wait_for_exit_or(process: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
