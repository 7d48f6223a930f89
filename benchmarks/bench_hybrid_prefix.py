"""Prefix caching on a hybrid model over a multi-turn workload: hit rate and wall time, caching on vs off.

A Qwen3-Next-shaped model (Gated DeltaNet and attention layers 3:1, MoE) from a config, random
weights, fp32. Each conversation's turn k+1 prompt is its turn-k prompt + completion + new text; all
conversations of a turn go in one generate call. Both sides run the same turns with the same seeds
(tokens compared); the cached side starts each repeat with an empty cache. Also prints the bytes of
one state snapshot of this model and of Qwen3-Next-80B-A3B's shape (bf16 weights).

    PYTHONPATH=. python benchmarks/bench_hybrid_prefix.py [--conversations 8] [--turns 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers as tf

from rollout import LLM, EngineConfig, SamplingParams


def qwen3_next_shaped(seed: int) -> tf.PreTrainedModel:
    config = tf.Qwen3NextConfig(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=8,
        layer_types=["linear_attention"] * 3
        + ["full_attention"]
        + ["linear_attention"] * 3
        + ["full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_num_value_heads=8,
        linear_num_key_heads=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=128,
        max_position_embeddings=4096,
    )
    torch.manual_seed(seed)
    return tf.Qwen3NextForCausalLM(config).eval()


def run_conversations(llm: LLM, args: argparse.Namespace, seed: int) -> tuple[float, list[list[int]]]:
    """Runs every turn of every conversation; returns the wall seconds and all completions."""
    g = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(3, 4096, (args.first_prompt,), generator=g).tolist() for _ in range(args.conversations)
    ]
    params = SamplingParams(max_tokens=args.new_tokens, temperature=1.0, seed=seed, ignore_eos=True)
    completions, elapsed = [], 0.0
    for _ in range(args.turns):
        start = time.perf_counter()
        outputs = llm.generate(prompts, params)
        elapsed += time.perf_counter() - start
        turn = [list(o.outputs[0].token_ids) for o in outputs]
        completions += turn
        user = [torch.randint(3, 4096, (args.user_tokens,), generator=g).tolist() for _ in prompts]
        prompts = [p + c + u for p, c, u in zip(prompts, turn, user, strict=True)]
    return elapsed, completions


def snapshot_bytes(llm: LLM) -> int:
    snapshots = llm.engine.block_manager.snapshots
    return snapshots.nbytes() // len(snapshots)


def qwen3_next_80b_snapshot_bytes() -> int:
    """Per Gated DeltaNet layer: conv state [conv_dim, kernel] in the model's dtype (bf16), recurrent
    state [value heads, key dim, value dim] in fp32 (transformers' kernels keep it so)."""
    c = tf.Qwen3NextConfig()  # the defaults are Qwen3-Next-80B-A3B's
    conv_dim = (
        2 * c.linear_num_key_heads * c.linear_key_head_dim
        + c.linear_num_value_heads * c.linear_value_head_dim
    )
    per_layer = conv_dim * c.linear_conv_kernel_dim * 2 + (
        c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim * 4
    )
    return per_layer * c.layer_types.count("linear_attention")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--first-prompt", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--user-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = dict(num_blocks=2048, max_num_batched_tokens=2048, max_model_len=2048)
    sides = {
        "caching off": LLM(
            model=qwen3_next_shaped(0), config=EngineConfig(enable_prefix_caching=False, **config)
        ),
        "caching on": LLM(model=qwen3_next_shaped(0), config=EngineConfig(**config)),
    }
    times = {name: [] for name in sides}
    outputs = {}
    for repeat in range(args.repeats + 1):  # the first round warms up
        for name, llm in sides.items():
            llm.reset_prefix_cache()
            before = llm.engine.stats()
            elapsed, outputs[name] = run_conversations(llm, args, seed=repeat)
            after = llm.engine.stats()
            if repeat:
                times[name].append(elapsed)
            computed = after["num_prompt_tokens_computed"] - before["num_prompt_tokens_computed"]
            hit = after["num_prefix_hit_tokens"] - before["num_prefix_hit_tokens"]
            print(
                f"round {repeat} {name:>11}: {elapsed:6.2f} s, prompt tokens computed {computed:,}, hit {hit:,}"
            )
        print(f"round {repeat}: same tokens on both sides: {outputs['caching off'] == outputs['caching on']}")
    hit_rate = hit / (hit + computed)
    off, on = (statistics.median(times[name]) for name in sides)
    print(
        f"{args.conversations} conversations x {args.turns} turns, first prompt {args.first_prompt}, "
        f"+{args.new_tokens} generated +{args.user_tokens} user tokens per turn"
    )
    print(f"median wall: off {off:.2f} s, on {on:.2f} s, speed-up {off / on:.2f}x; hit rate {hit_rate:.1%}")
    print(
        f"bytes per snapshot: this model {snapshot_bytes(sides['caching on']):,}, "
        f"Qwen3-Next-80B-A3B {qwen3_next_80b_snapshot_bytes():,}"
    )


if __name__ == "__main__":
    main()
