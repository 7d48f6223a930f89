"""Phase s: sleep mode on CUDA (rollout/engine/sleep/): the device memory `sleep(level)` gives back, read with
torch.cuda.mem_get_info (the caching allocator emptied), the time to sleep and to wake, and greedy outputs
after the wake-up equal to those before (level 2: after the weights were written again by an update).

A Qwen2.5-0.5B-shaped Llama (hidden 896, 24 layers, vocabulary 151936) in bf16, random weights from a seed;
on the CPU dry run a tiny one. Not in the default calls (their time is spent): `scripts/gpu_suite.sh s`.
"""

from __future__ import annotations

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from benchmarks.gpu_suite.report import Context, skipped, table
from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import random_prompts

LEVELS = (1, 2)
CASE_SECONDS = 20.0
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, logprobs=0)
SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, vocab_size=151936)
DRY_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=128)
GIB = 2**30


def run(ctx: Context) -> tuple[dict, str]:
    cases = []
    for level in LEVELS:
        if not ctx.allows(CASE_SECONDS):
            cases.append({"level": level, "error": skipped()})
            continue
        try:
            cases.append(_case(ctx, level))
        except Exception as err:  # recorded in the case: the other level still runs
            cases.append({"level": level, "error": f"{type(err).__name__}: {err}"[:400]})
        ctx.checkpoint({"cases": cases}, _table(cases))
    return {"cases": cases}, _table(cases)


def _table(cases: list[dict]) -> str:
    header = ["level", "engine holds", "given back", "sleep", "wake (+ update)", "greedy equal after"]
    rows = [[c["level"], c["error"]] for c in cases if "error" in c]
    rows += [
        [
            c["level"], f"{c['held_bytes'] / GIB:.2f} GiB", f"{c['freed_bytes'] / GIB:.2f} GiB",
            f"{c['sleep_s'] * 1e3:.0f} ms", f"{c['wake_s'] * 1e3:.0f} ms", f"{c['greedy_equal']}/{c['samples']}",
        ]
        for c in cases if "error" not in c
    ]  # fmt: skip
    return "sleep mode, bf16 Qwen2.5-0.5B shape (device memory from mem_get_info):\n\n" + table(header, rows)


def _free_bytes(ctx: Context) -> int:
    if ctx.device != "cuda":
        from rollout.engine.sleep.host_memory import rss_bytes

        return -rss_bytes()  # the dry run: resident host memory, negated (free grows as it drops)
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def _case(ctx: Context, level: int) -> dict:
    torch.manual_seed(0)
    shape = DRY_SHAPE if ctx.dry_run else SHAPE
    config = LlamaConfig(**shape, num_attention_heads=14 if not ctx.dry_run else 4, num_key_value_heads=2)
    model = LlamaForCausalLM(config).to(device=ctx.device, dtype=torch.bfloat16).eval()
    weights = {name: t.detach().clone() for name, t in model.state_dict().items()}
    before_engine = _free_bytes(ctx)
    llm = LLM(model=model, config=EngineConfig(gpu_memory_utilization=0.3, max_model_len=1024))
    held = before_engine - _free_bytes(ctx)
    prompts = random_prompts(8, 20, 60, seed=level)
    before = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
    awake = _free_bytes(ctx)
    start = time.perf_counter()
    llm.sleep(level=level)
    sleep_s = time.perf_counter() - start
    freed = _free_bytes(ctx) - awake
    start = time.perf_counter()
    llm.wake_up(tags=["weights"])
    if level == 2:
        llm.update_weights(weights)
    llm.wake_up(tags=["kv_cache"])
    wake_s = time.perf_counter() - start
    after = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
    equal = sum(a == b for a, b in zip(before, after, strict=True))
    return dict(level=level, held_bytes=held, freed_bytes=freed, sleep_s=sleep_s, wake_s=wake_s,
                greedy_equal=equal, samples=len(prompts), cuda=ctx.device == "cuda")  # fmt: skip


def failed(data: dict) -> bool:
    """A crash, outputs that differ after the wake-up, or (on CUDA, level 2) less than 80% of what the
    engine holds given back."""
    ran = [c for c in data["cases"] if not c.get("error", "").startswith("SKIPPED")]
    short = [c for c in ran if "error" not in c and c["cuda"] and c["level"] == 2]
    return any("error" in c or c["greedy_equal"] != c["samples"] for c in ran) or any(
        c["freed_bytes"] < 0.8 * c["held_bytes"] for c in short
    )
