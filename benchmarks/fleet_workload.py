"""The agent workload bench_fleet.py drives: episodes of chat turns against one OpenAI endpoint.

Each episode is a system prompt, then turns: the reply and a new user message extend the prompt, as
an agent loop does. Per reply it keeps what the fleet reports: prompt, completion and cached tokens,
and the weight versions each sample was made with. A small model is built here (no model hub).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

BLOCK = 16
TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


def save_small_model(path: Path, hidden: int = 256, layers: int = 4) -> Path:
    """A randomly initialized Llama (a few million parameters) and a character tokenizer."""
    import torch
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    chars = "abcdefghijklmnopqrstuvwxyz0123456789 <>/.,:"
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")
    tokenizer.chat_template = TEMPLATE
    config = LlamaConfig(
        vocab_size=64, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@dataclass
class Turn:
    episode: int
    turn: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reusable_tokens: int  # whole blocks of the previous turn's computed tokens this prompt starts with
    versions: list[int] = field(default_factory=list)  # the weight versions of the sample's tokens


def run_workload(
    base_url: str, episodes: int, turns: int, max_tokens: int, concurrency: int, model: str
) -> tuple[list[Turn], list[str], float]:
    """Runs every episode (`concurrency` at once); returns the turns, the errors and the wall time."""
    results: list[Turn] = []
    errors: list[str] = []
    lock = threading.Lock()
    started = time.perf_counter()
    with httpx.Client(timeout=600) as http, ThreadPoolExecutor(concurrency) as pool:
        jobs = [pool.submit(_episode, http, base_url, e, turns, max_tokens, model) for e in range(episodes)]
        for job in jobs:
            turns_done, error = job.result()
            with lock:
                results += turns_done
                errors += [error] if error else []
    return results, errors, time.perf_counter() - started


def _episode(
    http: httpx.Client, base_url: str, episode: int, turns: int, max_tokens: int, model: str
) -> tuple[list[Turn], str | None]:
    system = f"you are agent {episode}. solve the task in small steps, check each step. " * 2
    messages = [{"role": "system", "content": system}, {"role": "user", "content": f"task {episode}: begin"}]
    done: list[Turn] = []
    computed_before: list[int] = []  # the token ids the previous turn computed KV for
    for turn in range(turns):
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 1.0}
        reply = http.post(f"{base_url}/chat/completions", json=body)
        if reply.status_code != 200:
            return done, f"episode {episode} turn {turn}: {reply.status_code} {reply.text[:200]}"
        data = reply.json()
        usage, choice = data["usage"], data["choices"][0]
        prompt, prompt_ids = usage["prompt_tokens"], data["prompt_token_ids"]
        reusable = min(_common_prefix(computed_before, prompt_ids), prompt - 1) // BLOCK * BLOCK
        versions = [v for _, v in choice["weight_versions"]]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        done.append(Turn(episode, turn, prompt, usage["completion_tokens"], cached, reusable, versions))
        computed_before = prompt_ids + choice["token_ids"][:-1]  # the last sampled token has no KV yet
        messages += [
            {"role": "assistant", "content": choice["message"]["content"]},
            {"role": "user", "content": f"step {turn} done, go on"},
        ]
    return done, None


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def summarize(turns: list[Turn], wall_s: float) -> dict[str, float]:
    later = [t for t in turns if t.turn > 0]
    reusable = sum(t.reusable_tokens for t in later)
    hit = sum(min(t.cached_tokens, t.reusable_tokens) for t in later)
    tokens = sum(t.prompt_tokens + t.completion_tokens for t in turns)
    return {
        "turns": len(turns),
        "reusable_hit_rate": round(hit / max(reusable, 1), 4),
        "cached_tokens": sum(t.cached_tokens for t in turns),
        "prompt_tokens": sum(t.prompt_tokens for t in turns),
        "wall_s": round(wall_s, 2),
        "requests_per_s": round(len(turns) / wall_s, 2),
        "tokens_per_s": round(tokens / wall_s, 1),
        "mixed_version_samples": sum(len(set(t.versions)) > 1 for t in turns),
    }
