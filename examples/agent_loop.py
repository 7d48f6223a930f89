"""A tool-using agent on the OpenAI API, trained with GRPO on its token-exact trajectories.

    python examples/agent_loop.py                  # ~1 minute on a laptop CPU, several on a busy one
    python examples/agent_loop.py --rounds 3 --group 8
    python examples/agent_loop.py --fleet 2          # the same loop against a Ray Serve fleet's endpoint

1. Builds a tiny chat model (a character tokenizer, a Hermes-style template that writes tool calls
   as `<tool_call>{json}</tool_call>`) and teaches it, with a few hundred supervised steps on
   scripted conversations, to look up the weather of two cities with a `get_weather` tool.
2. Starts `rollout serve --openai-port` on it; the agent talks to it with the official `openai`
   client: the model calls the tool, the result goes back as a `tool` message, token-in
   (`prompt_token_ids`: the previous turn's prompt + sampled tokens), so no earlier token is ever
   re-tokenized. Each turn's prefix-cache hit on the previous turn's tokens is measured (the reply's
   `usage.prompt_tokens_details.cached_tokens`). With `--fleet N`, N replicas behind one endpoint
   (`rollout.fleet.ServeFleet`, needs the ray extra) serve it instead, the agent unchanged.
3. Scores each trajectory, takes a GRPO step on its exact tokens (the server's logprobs are the
   behaviour policy, checked against the trainer's teacher-forced ones), pushes the weights over
   gRPC and runs the next round, which the server reports sampling at the new weight version.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import openai
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rollout.client import RolloutClient

CITIES = {"paris": "sunny", "oslo": "rainy", "lima": "foggy", "rome": "windy"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% endif %}"
    '{% for call in m.tool_calls or [] %}<tool_call>{"name": "{{ call.function.name }}", "arguments": '
    "{% if call.function.arguments is string %}{{ call.function.arguments }}"
    "{% else %}{{ call.function.arguments | tojson }}{% endif %}}</tool_call>{% endfor %}"
    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
BLOCK_SIZE = 16


def chat_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; `</s>` (the end of every turn) is the only multi-character token."""
    chars = 'abcdefghijklmnopqrstuvwxyz0123456789 <>/{}":,._?'
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def call(city: str) -> dict:
    return {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}


def scripted(first: str, second: str) -> list[dict]:
    """The conversation the model learns: two tool calls, then the answer."""
    return [
        {"role": "user", "content": f"weather in {first} and {second}?"},
        {"role": "assistant", "tool_calls": [call(first)]},
        {"role": "tool", "content": CITIES[first]},
        {"role": "assistant", "tool_calls": [call(second)]},
        {"role": "tool", "content": CITIES[second]},
        {"role": "assistant", "content": f"{CITIES[first]}, then {CITIES[second]}."},
    ]


def build_model(tokenizer: PreTrainedTokenizerFast, steps: int) -> LlamaForCausalLM:
    """A tiny Llama trained on every scripted conversation (seconds on a CPU)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    pairs = [p for p in itertools.permutations(CITIES, 2)]
    rows = [tokenizer.apply_chat_template(scripted(*p), tools=TOOLS, return_dict=False) for p in pairs]
    width = max(map(len, rows))
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    labels = ids.masked_fill(ids == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    print(f"supervised: {steps} steps on {len(rows)} scripted conversations", flush=True)
    start = time.monotonic()
    for step in range(1, steps + 1):
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % max(1, steps // 5) == 0 or step == steps:  # a minute or more on a busy CPU: show it moves
            print(
                f"  step {step}/{steps}: loss {loss.item():.3f} ({time.monotonic() - start:.0f} s)",
                flush=True,
            )
    print(f"supervised: {steps} steps on {len(rows)} conversations, final loss {loss.item():.3f}", flush=True)
    return model.eval()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(model_dir: str) -> Iterator[tuple[str, str]]:
    """`rollout serve` with the OpenAI front end; yields (gRPC address, OpenAI base_url)."""
    port, http_port = free_port(), free_port()
    command = [sys.executable, "-m", "rollout.cli", "serve", "--model", model_dir, "--port", str(port)]
    command += ["--openai-port", str(http_port), "--block-size", str(BLOCK_SIZE)]
    print("starting rollout serve --openai-port on the trained model (its log follows)", flush=True)
    process = subprocess.Popen(command)
    base_url = f"http://127.0.0.1:{http_port}/v1"
    try:
        deadline = time.monotonic() + 300
        while not healthy(base_url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rollout serve did not come up")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", base_url
    finally:
        process.terminate()
        process.wait(30)


def healthy(base_url: str) -> bool:
    try:
        return httpx.get(base_url.removesuffix("/v1") + "/health").status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def serving(model_dir: str, fleet: int) -> Iterator[tuple[str, Callable[[torch.nn.Module], int]]]:
    """(OpenAI base_url, push): one `rollout serve`, or `fleet` replicas behind one endpoint."""
    if not fleet:
        with serve(model_dir) as (address, base_url), RolloutClient(address) as trainer_side:
            yield base_url, lambda model: trainer_side.update_weights(model, transport="grpc")
        return
    from rollout.fleet import ServeFleet

    flags = ["--model", model_dir, "--block-size", str(BLOCK_SIZE)]
    with ServeFleet(fleet, flags, openai_port=free_port()) as replicas:
        replicas.wait_for_replicas()
        yield replicas.base_url, replicas.update_weights


@dataclass
class Trajectory:
    """One episode: its exact tokens, which of them the model sampled, and the server's logprobs."""

    cities: tuple[str, str]
    tokens: list[int] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    answer: str = ""
    versions: set[int] = field(default_factory=set)

    def add_turn(self, prompt: list[int], completion: list[int], logprobs: list[float]) -> None:
        assert prompt[: len(self.tokens)] == self.tokens, "a turn's prompt must extend the previous turn"
        self.sampled += [False] * (len(prompt) - len(self.tokens)) + [True] * len(completion)
        self.tokens = prompt + completion
        self.logprobs += logprobs

    @property
    def reward(self) -> float:
        answer = f"{CITIES[self.cities[0]]}, then {CITIES[self.cities[1]]}."
        return 0.25 * sum(a == b for a, b in zip(self.calls, self.cities, strict=False)) + 0.5 * (
            self.answer == answer
        )


class Agent:
    """Runs episodes through the OpenAI API and keeps the numbers the example reports."""

    def __init__(self, base_url: str, tokenizer: PreTrainedTokenizerFast):
        self.client = openai.OpenAI(base_url=base_url, api_key="none")
        self.model = self.client.models.list().data[0].id
        self.base_url, self.tokenizer = base_url, tokenizer
        self.hits = self.reusable = self.calls_checked = self.calls_malformed = 0

    def episode(self, cities: tuple[str, str], seed: int, max_turns: int = 4) -> Trajectory:
        messages = [{"role": "user", "content": f"weather in {cities[0]} and {cities[1]}?"}]
        trajectory = Trajectory(cities)
        for turn in range(max_turns):
            reply = self.measured_turn(messages, trajectory.tokens, seed * 100 + turn)
            choice = reply.choices[0]
            ids = choice.model_extra["token_ids"]
            trajectory.add_turn(
                reply.model_extra["prompt_token_ids"], ids, [e.logprob for e in choice.logprobs.content]
            )
            trajectory.versions.add(choice.model_extra["weight_version"])
            self.check_tool_calls(choice.message, ids)
            messages.append(choice.message.model_dump(exclude_none=True))
            if not choice.message.tool_calls:
                trajectory.answer = choice.message.content or ""
                break
            for tool_call in choice.message.tool_calls:
                city = json.loads(tool_call.function.arguments).get("city", "")
                trajectory.calls.append(city)
                result = {
                    "role": "tool",
                    "tool_call_id": tool_call.id,
                    "content": CITIES.get(city, "unknown"),
                }
                messages.append(result)
        return trajectory

    def measured_turn(self, messages: list[dict], earlier: list[int], seed: int) -> object:
        """One chat turn, token-in after the first; counts the prefix-cache hits on `earlier`, the
        previous turn's tokens (hits cover a prompt's leading full blocks, so min() is exact)."""
        reply = self.client.chat.completions.create(
            model=self.model, messages=messages, tools=TOOLS, max_tokens=96, temperature=1.0, seed=seed,
            logprobs=True, extra_body={"prompt_token_ids": earlier} if earlier else {},
        )  # fmt: skip
        if earlier:  # the full blocks of `earlier` but its last token, whose KV was never computed
            reusable = (len(earlier) - 1) // BLOCK_SIZE * BLOCK_SIZE
            self.reusable += reusable
            self.hits += min(reply.usage.prompt_tokens_details.cached_tokens, reusable)
        return reply

    def check_tool_calls(self, message: object, token_ids: list[int]) -> None:
        """The server's `tool_calls` are exactly the calls in the model's own tokens; a malformed
        call comes back as the reply's text, never dropped."""
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        bodies = re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S)
        try:
            emitted = [json.loads(body) for body in bodies]
        except json.JSONDecodeError:
            assert message.content == text and not message.tool_calls, message
            self.calls_malformed += 1
            return
        parsed = message.tool_calls or []
        got = [{"name": c.function.name, "arguments": json.loads(c.function.arguments)} for c in parsed]
        assert got == emitted, (got, emitted)
        self.calls_checked += len(got)


def teacher_forced(model: LlamaForCausalLM, trajectory: Trajectory) -> torch.Tensor:
    """The trainer's log p of each sampled token, from one forward pass over the whole episode."""
    ids = torch.tensor([trajectory.tokens])
    logp = model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
    logp = logp.gather(-1, ids[0, 1:, None])[:, 0]
    return logp[torch.tensor(trajectory.sampled[1:])]


def grpo_step(model: LlamaForCausalLM, optimizer: torch.optim.Optimizer, groups: list) -> float:
    """Group-normalized advantages, importance-weighted by the server's logprobs; returns the max
    |trainer - server| logprob over every sampled token."""
    losses, drift = [], 0.0
    for group in groups:
        rewards = torch.tensor([t.reward for t in group])
        advantages = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-4)
        for trajectory, advantage in zip(group, advantages, strict=True):
            logp = teacher_forced(model, trajectory)
            behaviour = torch.tensor(trajectory.logprobs)
            drift = max(drift, (logp.detach() - behaviour).abs().max().item())
            losses.append(-(torch.exp(logp - behaviour) * advantage))
    loss = torch.cat(losses).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return drift


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--group", type=int, default=4, help="episodes per prompt (the GRPO group)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per round")
    parser.add_argument("--sft-steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument(
        "--fleet", type=int, default=0, help="serve with N Ray Serve replicas (0: one server)"
    )
    args = parser.parse_args()

    tokenizer = chat_tokenizer()
    model = build_model(tokenizer, args.sft_steps)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    prompts = itertools.cycle(itertools.permutations(CITIES, 2))
    with tempfile.TemporaryDirectory() as model_dir:
        model.save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
        with serving(model_dir, args.fleet) as (base_url, push):
            agent = Agent(base_url, tokenizer)
            for round_ in range(args.rounds):
                batch = [next(prompts) for _ in range(args.prompts)]
                print(
                    f"round {round_}: {len(batch)} prompts x {args.group} episodes, then a GRPO step",
                    flush=True,
                )
                groups = [
                    [agent.episode(c, seed=round_ * 1000 + i) for i in range(args.group)] for c in batch
                ]
                episodes = [t for g in groups for t in g]
                versions = sorted(set().union(*(t.versions for t in episodes)))
                reward = sum(t.reward for t in episodes) / len(episodes)
                drift = grpo_step(model, optimizer, groups)
                version = push(model)
                print(
                    f"round {round_}: served at weight version {versions}, mean reward {reward:.3f}, "
                    f"max |server - trainer logp| {drift:.2e}, pushed weights v{version}"
                )
    print(f"tool calls parsed == emitted: {agent.calls_checked}; malformed, as text: {agent.calls_malformed}")
    print(f"prefix cache on turn k+1: {agent.hits} of {agent.reusable} reusable tokens of turn k hit")


if __name__ == "__main__":
    main()
