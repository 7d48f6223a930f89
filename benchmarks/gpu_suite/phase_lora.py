"""Phase l: a LoRA adapter push on one GPU: LLM.update_weights(peft_model) sends only the adapter and merges
it into the kept base on the device (rollout/weights/lora.py); it must serve what a push of PEFT's own merged
weights serves. fp32 enforced (greedy equal, logprobs within 1e-4), bf16 reported; both count the tensors
that came out bit-equal.
"""

from __future__ import annotations

import torch

from benchmarks.gpu_suite.report import Context, skipped, table
from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import random_prompts, tiny_model
from tests.weights.lora_builders import merged_state, peft_policy

DTYPES = ("float32", "bfloat16")
CASE_SECONDS = 6.0
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, logprobs=0)
TOLERANCE = 1e-4


def run(ctx: Context) -> tuple[dict, str]:
    cases = []
    for dtype in DTYPES:
        if not ctx.allows(CASE_SECONDS):
            cases.append({"dtype": dtype, "error": skipped()})
            continue
        try:
            cases.append(_case(ctx, dtype))
        except Exception as err:  # recorded in the case: the other dtype still runs
            cases.append({"dtype": dtype, "error": f"{type(err).__name__}: {err}"[:400]})
        ctx.checkpoint({"cases": cases}, _table(cases))
    return {"cases": cases}, _table(cases)


def _table(cases: list[dict]) -> str:
    header = ["dtype", "tensors bit-equal", "greedy equal", "max abs dlogprob"]
    rows = [[c["dtype"], c["error"]] for c in cases if "error" in c]
    rows += [
        [
            c["dtype"],
            f"{c['bit_equal']}/{c['tensors']}",
            f"{c['greedy_equal']}/{c['samples']}",
            c["max_dlogprob"],
        ]
        for c in cases
        if "error" not in c
    ]
    return "adapter push against a push of the merged weights:\n\n" + table(header, rows)


def _case(ctx: Context, dtype_name: str) -> dict:
    dtype = getattr(torch, dtype_name)
    policy = peft_policy(adapter_seed=1).to(device=ctx.device, dtype=dtype)
    adapter, merged = _engine(ctx, dtype_name), _engine(ctx, dtype_name)
    adapter.update_weights(policy)
    merged.update_weights(merged_state(policy))
    ours, theirs = adapter.engine.model.state_dict(), merged.engine.model.state_dict()
    prompts = random_prompts(4, 5, 30, seed=1)
    got = [o.outputs[0] for o in adapter.generate(prompts, GREEDY)]
    want = [o.outputs[0] for o in merged.generate(prompts, GREEDY)]
    return {
        "dtype": dtype_name,
        "tensors": len(ours),
        "bit_equal": sum(torch.equal(t, theirs[name]) for name, t in ours.items()),
        "samples": len(prompts),
        "greedy_equal": sum(g.token_ids == w.token_ids for g, w in zip(got, want, strict=True)),
        "max_dlogprob": max(
            abs(a - b)
            for g, w in zip(got, want, strict=True)
            for a, b in zip(g.token_logprobs, w.token_logprobs, strict=True)
        ),
    }


def _engine(ctx: Context, dtype_name: str) -> LLM:
    model = tiny_model(seed=0).to(device=ctx.device, dtype=getattr(torch, dtype_name))
    config = EngineConfig(
        device=ctx.device, dtype=dtype_name, num_blocks=256, max_num_seqs=8
    )  # 5 graphs, not 35
    return LLM(model=model, config=config)


def failed(data: dict) -> bool:
    fp32 = [
        c for c in data["cases"] if c["dtype"] == "float32" and not c.get("error", "").startswith("SKIPPED")
    ]
    return any(
        "error" in c or c["greedy_equal"] != c["samples"] or c["max_dlogprob"] > TOLERANCE for c in fp32
    )
