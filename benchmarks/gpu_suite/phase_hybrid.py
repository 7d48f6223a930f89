"""Phase h: hybrid models on CUDA: the recurrent states' share of a cache budget read from the device's free
memory (hybrid/state_budget.py through kv_sizing.kv_cache_bytes: torch.cuda.mem_get_info), and prefix
caching through state snapshots, greedy equal with caching on and off.

Models from the test zoo (tests/models/zoo.py: weights tuned so the states carry information): Gated
DeltaNet + attention (Qwen3-Next), Mamba-2 + attention (Nemotron-H); fp32 enforced, bf16 reported. Round 2
sends each prompt extended by its completion and new text, so the cached engine resumes from a snapshot.
"""

from __future__ import annotations

import torch

from benchmarks.gpu_suite.report import Context, skipped, table
from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import random_prompts
from tests.models.zoo import HYBRID, build

CASES = (("qwen3_next", "float32"), ("nemotron_h", "float32"), ("qwen3_next", "bfloat16"))
CASE_SECONDS = 10.0  # two engines of a tiny hybrid (self-check, per-sequence recurrent calls), 2 rounds
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, logprobs=0, logprobs_mode="raw", ignore_eos=True)
NEW_TEXT = [7, 8, 9, 10, 11]


def run(ctx: Context) -> tuple[dict, str]:
    cases = []
    for family, dtype in CASES:
        if not ctx.allows(CASE_SECONDS):
            cases.append({"family": family, "dtype": dtype, "error": skipped()})
            continue
        try:
            cases.append(_case(ctx, family, dtype))
        except Exception as err:  # recorded in the case: the other cases still run
            cases.append({"family": family, "dtype": dtype, "error": f"{type(err).__name__}: {err}"[:400]})
        ctx.checkpoint({"cases": cases}, _table(cases))
    return {"cases": cases}, _table(cases)


def _table(cases: list[dict]) -> str:
    header = ["model", "dtype", "cache budget", "state bytes/seq", "slots + snapshots", "round 2 hit tokens"]
    header += ["greedy equal (on/off)", "max abs dlogprob"]
    rows = [[c["family"], c["dtype"], c["error"]] for c in cases if "error" in c]
    rows += [
        [
            c["family"], c["dtype"], f"{c['budget_bytes'] / 2**30:.1f} GiB", c["state_bytes_per_seq"],
            f"{c['num_slots']} + {c['max_state_snapshots']}", c["hit_tokens"],
            f"{c['greedy_equal']}/{c['samples']}", f"{c['max_dlogprob']:.1e}",
        ]
        for c in cases if "error" not in c
    ]  # fmt: skip
    return table(header, rows)


def _case(ctx: Context, family: str, dtype_name: str) -> dict:
    cached, plain = (_engine(ctx, family, dtype_name, caching) for caching in (True, False))
    budget = cached.engine.state_budget
    prompts = random_prompts(4, 40, 70, seed=7)
    first = cached.generate(prompts, GREEDY)
    pairs = list(zip(first, plain.generate(prompts, GREEDY), strict=True))
    turns = [p + list(o.outputs[0].token_ids) + NEW_TEXT for p, o in zip(prompts, first, strict=True)]
    pairs += zip(cached.generate(turns, GREEDY), plain.generate(turns, GREEDY), strict=True)
    got, want = [g.outputs[0] for g, _ in pairs], [w.outputs[0] for _, w in pairs]
    stats = cached.engine.stats()
    return {
        "family": family,
        "dtype": dtype_name,
        "budget_bytes": budget.budget,
        "state_bytes_per_seq": budget.bytes_per_seq,
        "num_slots": budget.num_slots,
        "max_state_snapshots": stats["max_state_snapshots"],
        "hit_tokens": stats["num_prefix_hit_tokens"],
        "samples": len(got),
        "greedy_equal": sum(g.token_ids == w.token_ids for g, w in zip(got, want, strict=True)),
        "max_dlogprob": max(
            abs(a - b)
            for g, w in zip(got, want, strict=True)
            for a, b in zip(g.token_logprobs, w.token_logprobs, strict=True)
        ),
    }


def _engine(ctx: Context, family: str, dtype_name: str, caching: bool) -> LLM:
    """No kv_cache_memory_gb: on CUDA the budget comes from the device's free memory."""
    model = build(next(f for f in HYBRID if f.model_type == family))
    model = model.to(device=ctx.device, dtype=getattr(torch, dtype_name))
    config = EngineConfig(
        device=ctx.device,
        dtype=dtype_name,
        max_model_len=256,
        max_num_seqs=8,
        max_num_batched_tokens=64,  # chunked prefills, ending on block boundaries where snapshots are taken
        enable_prefix_caching=caching,
    )
    return LLM(model=model, config=config)


def failed(data: dict) -> bool:
    """fp32: a crash, greedy tokens that differ, or no snapshot hit (prefix caching silently off)."""
    fp32 = [
        c for c in data["cases"] if c["dtype"] == "float32" and not c.get("error", "").startswith("SKIPPED")
    ]
    return any("error" in c or c["greedy_equal"] != c["samples"] or not c["hit_tokens"] for c in fp32)
