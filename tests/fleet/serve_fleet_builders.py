"""Builders for the Ray Serve fleet tests: a tiny chat model on disk, chat calls, replica counters."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import torch

from tests.builders import char_tokenizer, tiny_model

CHAT_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"
MODEL_NAME = "tiny"
BLOCK = 16  # the engine's default block size


def save_chat_model(path: Path) -> Path:
    tiny_model("llama").save_pretrained(path)
    char_tokenizer(CHAT_TEMPLATE).save_pretrained(path)
    return path


def fleet_serve_args(model: Path) -> list[str]:
    return [
        "--model",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--num-blocks",
        "512",
        "--no-self-check",
    ]


def chat(
    base_url: str, messages: list[dict[str, str]], headers: dict[str, str] | None = None, **fields: Any
) -> dict:
    body = {"model": MODEL_NAME, "messages": messages, "max_tokens": 8, "temperature": 0.0, **fields}
    reply = httpx.post(f"{base_url}/chat/completions", json=body, headers=headers or {}, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


def system_prompt(episode: int) -> str:
    return f"you are agent {'abcdefgh'[episode % 8]} " + "solve the task step by step " * 3


def run_episode(base_url: str, episode: int, turns: int, headers: dict[str, str] | None = None) -> list[dict]:
    """An agent episode: each turn's prompt is the previous prompt, its reply and a new user message."""
    messages = [
        {"role": "system", "content": system_prompt(episode)},
        {"role": "user", "content": "first step"},
    ]
    replies = []
    for turn in range(turns):
        reply = chat(base_url, messages, headers)
        replies.append(reply)
        content = reply["choices"][0]["message"]["content"]
        messages += [
            {"role": "assistant", "content": content},
            {"role": "user", "content": f"next step {turn}"},
        ]
    return replies


def finished_per_replica(fleet: Any) -> dict[str, int]:
    from rollout.fleet.replica_calls import Targeted

    return {
        r: int(fleet.handle.stats.remote(Targeted(r)).result(timeout_s=120).get("num_requests_finished", 0))
        for r in fleet.replicas()
    }


@contextmanager
def two_replica_fleet(model_dir: Path, **fleet_kwargs: Any) -> Iterator[Any]:
    """A ServeFleet of two replicas of `model_dir` (one CPU each, OpenAI port free) on a local Ray, shut down
    after; `fleet_kwargs` go to ServeFleet (e.g. grpc_port=0)."""
    import ray

    from rollout.fleet import ServeFleet

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    try:
        args = fleet_serve_args(model_dir)
        with ServeFleet(2, serve_args=args, num_cpus=1, openai_port=0, **fleet_kwargs) as fleet:
            fleet.wait_for_replicas()
            yield fleet
    finally:
        ray.shutdown()


def perturbed(seed: int) -> torch.nn.Module:
    """The tiny llama with seeded noise on every weight: a policy to push."""
    model = tiny_model("llama")
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(seed)) * 0.05)
    return model


def replica_greedy(fleet: Any, prompts: list, params: Any) -> list[list[list[int]]]:
    """Each replica's outputs for `prompts`, asked at its own gRPC address (not through the fleet's)."""
    from rollout.client import RolloutClient

    out = []
    for address in fleet.grpc_addresses:
        with RolloutClient([address], token=fleet.token) as client:
            out.append([o.outputs[0].token_ids for o in client.generate(prompts, params)])
    return out


def offline_greedy(model: Any, model_dir: Path, prompts: list, params: Any) -> list[list[int]]:
    """The oracle: an offline engine on `model` (a module or a path) with the fleet model's tokenizer."""
    from rollout import LLM, EngineConfig

    llm = LLM(model=model, tokenizer=str(model_dir), config=EngineConfig(num_blocks=256, self_check=False))
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
