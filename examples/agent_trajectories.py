"""Token-exact trajectories from an agent framework, for RL: the recorder under the framework's `openai` client.

    pip install -e ".[openai,agents,structured]"     # the recorder, the server, forced tool calls
    pip install openai-agents                        # optional: the OpenAI Agents SDK
    python examples/agent_trajectories.py            # the Agents SDK when it is installed, else the plain client
    python examples/agent_trajectories.py --plain    # the plain `openai` client (chat completions, token-in)

1. Saves a random tiny chat model (a character tokenizer, a Hermes-style template that writes tool calls
   as `<tool_call>{json}</tool_call>`) and starts `rollout serve --openai-port` on it.
2. Runs a few episodes of an agent with a `get_weather` tool. Its first turn forces the call
   (`tool_choice="required"`: the grammar makes even this random model call the tool with valid
   arguments), the tool answers, the model answers. The Agents SDK talks to `/v1/responses` and chains
   turns with `previous_response_id` (the server continues each turn token-in); the plain client sends
   `prompt_token_ids` to `/v1/chat/completions`.
3. The recorder, under the client, keeps every turn's token ids, logprobs and weight versions, checks each
   turn's prefix against the turn before, and exports the batch a TRL `rollout_func` returns
   (`env_mask`: 1 on the model's tokens, 0 on the tool's and the template's).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import openai
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rollout.trajectories import Episode, TrajectoryRecorder, trl_batch

TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ (t.function or t).name }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{% if m.content is string %}{{ m.content }}{% endif %}"
    '{% for call in m.tool_calls or [] %}<tool_call>\n{"name": "{{ call.function.name }}", "arguments": '
    "{{ call.function.arguments }}}\n</tool_call>{% endfor %}"
    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["paris", "oslo"]}},
            "required": ["city"],
        },
    },
}
# The model is random: a bias on its end token keeps its free-text answers short (a trained one needs none).
BIAS = {"logit_bias": {"2": 5.0}}


def save_random_model(path: str) -> None:
    chars = 'abcdefghijklmnopqrstuvwxyz0123456789 <>/{}[]":,._?\n'
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


@contextmanager
def serve(model_dir: str) -> Iterator[str]:
    """`rollout serve --openai-port` on `model_dir`; yields the OpenAI base URL."""
    port, http_port = free_port(), free_port()
    command = [sys.executable, "-m", "rollout.cli", "serve", "--model", model_dir, "--port", str(port)]
    process = subprocess.Popen([*command, "--openai-port", str(http_port), "--served-model-name", "agent"])
    base_url = f"http://127.0.0.1:{http_port}/v1"
    try:
        deadline = time.monotonic() + 300
        while not healthy(base_url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("rollout serve did not come up")
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        process.wait(30)


def plain_episode(client: openai.OpenAI, seed: int) -> None:
    """Chat completions: a forced call, the tool's answer, the model's answer; token-in."""
    messages, extra = [{"role": "user", "content": "weather in paris?"}], {**BIAS, "seed": seed}
    first = client.chat.completions.create(
        model="agent",
        messages=messages,
        tools=[TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=400,
        extra_body=extra,
    )
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    tokens = first.model_extra["prompt_token_ids"] + first.choices[0].model_extra["token_ids"]
    client.chat.completions.create(
        model="agent",
        messages=messages,
        tools=[TOOL],
        max_tokens=400,
        extra_body={**extra, "prompt_token_ids": tokens},
    )


def agents_sdk_episode(client: openai.AsyncOpenAI, seed: int) -> None:
    """The OpenAI Agents SDK on /v1/responses: a forced first call, then the answer, chained by response id."""
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    extra = {**BIAS, "seed": seed}
    settings = ModelSettings(
        tool_choice="required", parallel_tool_calls=False, max_tokens=400, extra_body=extra
    )
    agent = Agent(
        name="weather",
        instructions="be brief",
        tools=[get_weather],
        model=OpenAIResponsesModel("agent", client),
        model_settings=settings,
    )
    asyncio.run(Runner.run(agent, "weather in paris?", max_turns=4, auto_previous_response_id=True))


def report(episode: Episode) -> None:
    turns = ", ".join(
        f"{len(t.prompt_ids)}+{len(t.completion_ids)} ({t.endpoint}, stable={t.prefix_stable})"
        for t in episode.turns
    )
    print(f"{episode.name}: {len(episode.turns)} turns: prompt+completion tokens {turns}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--plain", action="store_true", help="the plain openai client, even with the Agents SDK"
    )
    parser.add_argument("--episodes", type=int, default=3)
    args = parser.parse_args()
    sdk = not args.plain and has_agents_sdk()
    print("framework:", "the OpenAI Agents SDK" if sdk else "the plain openai client", flush=True)
    recorder = TrajectoryRecorder()
    with tempfile.TemporaryDirectory() as model_dir:
        save_random_model(model_dir)
        with serve(model_dir) as base_url:
            for i in range(args.episodes):
                with recorder.episode(f"episode-{i}"):
                    if sdk:
                        client = openai.AsyncOpenAI(base_url=base_url, api_key="none")
                        agents_sdk_episode(recorder.wrap(client), seed=i)
                    else:
                        plain_episode(recorder.wrap(openai.OpenAI(base_url=base_url, api_key="none")), seed=i)
    episodes = list(recorder.episodes.values())
    for episode in episodes:
        report(episode)
    batch = trl_batch(episodes)  # refuses an episode that broke its prefix or branched
    for i, (mask, logprobs) in enumerate(zip(batch["env_mask"], batch["logprobs"], strict=True)):
        model_tokens = sum(len(t.completion_ids) for t in episodes[i].turns)
        assert sum(mask) == model_tokens and len(logprobs) == len(mask)
        print(
            f"sample {i}: {len(batch['prompt_ids'][i])} prompt tokens, {len(mask)} completion tokens "
            f"({sum(mask)} the model's, {len(mask) - sum(mask)} the environment's)"
        )
    print(f"TRL rollout_func batch: {len(batch['prompt_ids'])} samples, keys {sorted(batch)}")
    print("every turn prefix-stable:", all(e.prefix_stable for e in episodes))


def has_agents_sdk() -> bool:
    try:
        import agents  # noqa: F401
    except ImportError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(base_url: str) -> bool:
    try:
        return httpx.get(base_url.removesuffix("/v1") + "/health").status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    main()
