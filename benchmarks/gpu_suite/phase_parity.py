"""Phase c: greedy tokens and logprobs against transformers, per family, dtype and CUDA graphs on/off.

Families in order of need (parity_models.py: dense, hybrid, MoE, sliding window + softcap, then the
rest), each fp32 then bf16, graphs off then on; the cases the time box leaves are marked skipped. Per case: the engine's greedy tokens against transformers `generate` (eager attention), the engine's
raw logprobs against a teacher-forced forward of the same dtype on prompt + completion (mean/max
|dlogprob|, the IS statistic TRL logs), and beside it eager transformers' own incremental-decode
logprobs against the same kind of forward; in bf16 also each one's mean distance to an fp32 forward
(the target: the engine's bf16 no further from fp32 than transformers' own bf16); then, with graphs on, an `update_weights` after capture
must give the new model's greedy tokens (and its logprobs: a greedy flip on a near-tie shows as a tiny
|dlogprob|, stale weights as a large one). A graphs-on case that replayed no graph fails: it proved nothing,
unless the engine declined capture up front, naming why (`capture_refusal`: fp32 stacked experts); a hybrid
model never captures one: its graphs-on case is not run.
"""

from __future__ import annotations

import torch

from benchmarks.gpu_suite.parity_models import FAMILIES, HYBRID, make_model
from benchmarks.gpu_suite.report import Context, skipped, table
from rollout import LLM, EngineConfig, SamplingParams
from rollout.engine.cuda_graphs import capture_refusal

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CASE_SECONDS = 8.0  # a case's estimate on an H100 (two tiny models, 4 x 32 tokens, HF greedy per prompt)


def run(ctx: Context) -> tuple[dict, str]:
    prompts, new = _workload(ctx)
    graphs = (False,) if ctx.dry_run else (False, True)  # CUDA graphs exist only on CUDA
    cases = []
    for family in FAMILIES:
        for dtype_name in DTYPES:
            for graphs_on in graphs if family not in HYBRID else (False,):
                if ctx.allows(CASE_SECONDS):
                    cases.append(_guarded_case(ctx, family, dtype_name, graphs_on, prompts, new))
                    ctx.checkpoint({"cases": cases}, _table(cases))
                else:
                    cases.append(_case_key(family, dtype_name, graphs_on) | {"error": skipped()})
    return {"cases": cases, "prompts": len(prompts), "new_tokens": new}, _table(cases)


def _table(cases: list[dict]) -> str:
    header = ["family", "dtype", "graphs", "greedy equal", "first diff"]
    header += ["engine |dlp| mean/max", "eager |dlp| mean/max", "vs fp32: engine / eager", "after update"]
    rows = [
        [c["family"], c["dtype"], "on" if c["cuda_graphs"] else "off", _error_cell(c["error"])]
        for c in cases
        if "error" in c
    ]
    rows += [
        [
            c["family"], c["dtype"], _graphs_cell(c), f"{c['greedy_equal']}/{c['samples']}",
            c["first_divergence"], f"{c['engine_dlp_mean']:.2e} / {c['engine_dlp_max']:.2e}",
            f"{c['eager_dlp_mean']:.2e} / {c['eager_dlp_max']:.2e}", _vs_fp32_cell(c), c["after_update"],
        ]
        for c in cases if "error" not in c
    ]  # fmt: skip
    return table(header, rows)


def _workload(ctx: Context) -> tuple[list[list[int]], int]:
    generator = torch.Generator().manual_seed(0)
    count, length, new = (2, 12, 6) if ctx.dry_run else (4, 48, 32)
    prompts = [torch.randint(3, 500, (length + 3 * i,), generator=generator).tolist() for i in range(count)]
    return prompts, new


def _guarded_case(
    ctx: Context, family: str, dtype_name: str, graphs: bool, prompts: list[list[int]], new: int
) -> dict:
    """One case; an engine refusal or crash is recorded in the case (the other cases still run)."""
    try:
        return _case(ctx, family, dtype_name, graphs, prompts, new)
    except Exception as err:
        return _case_key(family, dtype_name, graphs) | {"error": f"{type(err).__name__}: {err}"[:400]}


def _case_key(family: str, dtype_name: str, graphs: bool) -> dict:
    return {"family": family, "dtype": dtype_name, "cuda_graphs": graphs}


def _vs_fp32_cell(case: dict) -> str:
    if "engine_vs_fp32_mean" not in case:
        return "-"
    return f"{case['engine_vs_fp32_mean']:.2e} / {case['eager_vs_fp32_mean']:.2e}"


def _error_cell(error: str) -> str:
    return error if error.startswith("SKIPPED") else f"REFUSED/FAILED: {error}"


def _graphs_cell(case: dict) -> str:
    if not case["cuda_graphs"]:
        return "off"
    if case.get("graphs_declined"):
        return f"on, declined by the engine: {case['graphs_declined']}"
    return f"on ({case['graph_steps']} steps replayed)"


def _case(
    ctx: Context, family: str, dtype_name: str, graphs: bool, prompts: list[list[int]], new: int
) -> dict:
    dtype, device = DTYPES[dtype_name], ctx.device
    reference = make_model(family, 0, device, dtype, attn="eager")
    config = EngineConfig(
        device=device, dtype=dtype_name, enforce_eager=not graphs, max_model_len=512, max_num_seqs=8
    )  # eight rows: five graphs to capture per engine, not 35
    llm = LLM(model=make_model(family, 0, device, dtype), config=config)
    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True, logprobs=0, logprobs_mode="raw")
    outs = [o.outputs[0] for o in llm.generate(prompts, params)]
    hf = [_hf_greedy(reference, p, new) for p in prompts]
    engine_dlp = [
        _dlogprob(reference, p, o.token_ids, o.token_logprobs) for p, o in zip(prompts, outs, strict=True)
    ]
    eager_dlp = [_dlogprob(reference, p, toks, lps) for p, (toks, lps) in zip(prompts, hf, strict=True)]
    diffs = [_first_diff(o.token_ids, toks) for o, (toks, _) in zip(outs, hf, strict=True)]
    case = _case_key(family, dtype_name, graphs) | {
        "graph_steps": _graph_steps(llm),
        "graphs_declined": capture_refusal(llm.engine.model) if graphs else None,
        "samples": len(prompts),
        "greedy_equal": sum(d is None for d in diffs),
        "first_divergence": min((d for d in diffs if d is not None), default="-"),
        "engine_dlp_mean": _mean(engine_dlp),
        "engine_dlp_max": max(max(d) for d in engine_dlp),
        "eager_dlp_mean": _mean(eager_dlp),
        "eager_dlp_max": max(max(d) for d in eager_dlp),
    }
    if dtype != torch.float32:  # the target: no further from fp32 than transformers' own low precision
        truth = make_model(family, 0, device, torch.float32, attn="eager")
        pairs = [(p, o.token_ids, o.token_logprobs) for p, o in zip(prompts, outs, strict=True)]
        case["engine_vs_fp32_mean"] = _mean([_dlogprob(truth, *pair) for pair in pairs])
        hf_pairs = [(p, toks, lps) for p, (toks, lps) in zip(prompts, hf, strict=True)]
        case["eager_vs_fp32_mean"] = _mean([_dlogprob(truth, *pair) for pair in hf_pairs])
    case["after_update"] = (
        _after_update(llm, family, device, dtype, prompts, new)
        if graphs or ctx.dry_run or family in HYBRID
        else "-"
    )
    return case


def _after_update(
    llm: LLM, family: str, device: str, dtype: torch.dtype, prompts: list[list[int]], new: int
) -> str:
    """Graphs were captured by the generate above; new weights copied in place must be what they replay."""
    updated = make_model(family, 1, device, dtype, attn="eager")
    llm.update_weights(updated.state_dict())
    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True, logprobs=0, logprobs_mode="raw")
    outs = [o.outputs[0] for o in llm.generate(prompts, params)]
    equal = sum(o.token_ids == _hf_greedy(updated, p, new)[0] for o, p in zip(outs, prompts, strict=True))
    dlp = max(
        max(_dlogprob(updated, p, o.token_ids, o.token_logprobs)) for o, p in zip(outs, prompts, strict=True)
    )
    return f"{equal}/{len(prompts)} equal, |dlp| max {dlp:.1e}"


@torch.no_grad()
def _hf_greedy(model, prompt: list[int], new: int) -> tuple[list[int], list[float]]:
    """transformers' own greedy decode (KV cache, eager attention) and its raw logprobs of the chosen tokens."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(
        ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, output_logits=True,
        return_dict_in_generate=True, pad_token_id=0,
    )  # fmt: skip
    tokens = out.sequences[0, len(prompt) :].tolist()
    logprobs = [
        torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, tokens, strict=True)
    ]
    return tokens, logprobs


@torch.no_grad()
def _dlogprob(model, prompt: list[int], tokens: list[int], logprobs: list[float]) -> list[float]:
    """|logprob - teacher-forced logprob| per completion token (the forward in the model's own dtype)."""
    ids = torch.tensor([prompt + tokens], device=model.device)
    logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    forced = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens, device=model.device)[:, None])[
        :, 0
    ]
    return (forced.cpu() - torch.tensor(logprobs)).abs().tolist()


def _graph_steps(llm: LLM) -> int:
    """Decode steps that replayed a captured graph (0 when none was captured)."""
    graphs = llm.engine.local_runner.decode_graphs
    return graphs.num_steps if graphs is not None and graphs.graphs else 0


def _first_diff(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)


def _mean(rows: list[list[float]]) -> float:
    values = [v for row in rows for v in row]
    return sum(values) / len(values)


def failed(data: dict) -> bool:
    """fp32 must be exact and a graphs-on case must have replayed graphs; bf16 is reported (its target: no
    worse than eager attention's mismatch); a skipped case is reported, not failed."""
    ran = [c for c in data["cases"] if not c.get("error", "").startswith("SKIPPED")]
    fp32 = [c for c in ran if c["dtype"] == "float32"]
    broken = any("error" in c or c["greedy_equal"] != c["samples"] for c in fp32)
    unproven = [
        c for c in ran if c["cuda_graphs"] and c.get("graph_steps") == 0 and not c.get("graphs_declined")
    ]
    return broken or bool(unproven)
