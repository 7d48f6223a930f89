"""One workload, every system, in one run: rollout, the transformers baselines and the matmul floor.

Shared by `rollout bench` and benchmarks/bench_engine.py, so both print the same table.
"""

from __future__ import annotations

import copy
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from transformers import PreTrainedModel

from rollout.bench import systems, workloads
from rollout.bench.floor import linear_seconds
from rollout.bench.workloads import Workload

# name -> (what it is, as printed; how to build it); the order is the table's
BASELINES: dict[str, tuple[str, Callable[[PreTrainedModel, Workload], systems.System]]] = {
    "generate_static": ("transformers generate, all rows at once (left padding)", systems.static_generate),
    "generate": ("transformers generate, one call per prompt", systems.generate),
    "generate_batch": ("transformers generate_batch (sdpa)", partial(systems.generate_batch, attn="sdpa")),
    "generate_batch_eager": (
        "transformers generate_batch (paged|eager)",
        partial(systems.generate_batch, attn="paged|eager"),
    ),
}

# name -> why it cannot run a model (None: it can), for the baselines that cannot run every model
REFUSALS: dict[str, Callable[[PreTrainedModel], str | None]] = {
    "generate_batch": systems.generate_batch_refusal,
    "generate_batch_eager": systems.generate_batch_refusal,
}


# On an H200 the hooks gave 0.02 s against a 3.2 s run ("198x the floor"): meaningless, so not printed.
NO_CUDA_FLOOR = (
    "decode steps replay CUDA graphs, which run no module hooks, so hooks would time prefill only "
    "(bench_decode_floor.py measures decode against the weight-read floor)"
)


@dataclass(frozen=True)
class Report:
    workload: Workload
    results: dict[str, systems.Result]
    floor_seconds: float | None  # rollout's linear layers, median over the timed runs; None on CUDA

    def to_json(self) -> dict:
        return {
            "description": self.workload.description,
            "results": {
                k: {"seconds": v.seconds, "tokens": v.tokens, "tokens_per_s": v.tokens_per_s}
                for k, v in self.results.items()
            },
            "matmul_floor_seconds": self.floor_seconds,
        }


def run(base: PreTrainedModel, work: Workload, baselines: list[str], device: str, repeats: int) -> Report:
    """Measures rollout (and its matmul floor, in the same runs) and each baseline on its own copy.

    Each system is built just before it runs and released after, so it has the device to itself: the
    engine's KV cache (sized from the free memory) would otherwise leave a baseline too little."""
    print(work.description, flush=True)
    builders: dict[str, Callable[[PreTrainedModel], systems.System]] = {
        "rollout": partial(systems.rollout_engine, work=work, device=device)
    }
    for name in (b for b in BASELINES if b in baselines):
        why = REFUSALS[name](base) if name in REFUSALS else None
        if why is not None:
            print(f"  {name}: skipped, {why}", flush=True)
            continue
        builders[name] = partial(BASELINES[name][1], work=work)
    print(f"  {'system':58s} {'tokens':>7s} {'seconds':>8s} {'tok/s':>9s}  rollout is", flush=True)
    results: dict[str, systems.Result] = {}
    floors: list[float] = []
    for i, (name, build) in enumerate(builders.items(), start=1):
        label = "rollout LLM.generate" if name == "rollout" else BASELINES[name][0]
        progress = partial(_progress, f"{work.name} {i}/{len(builders)}, {label}")
        progress(f"building, then a warm-up run and {repeats} timed runs")
        model = copy.deepcopy(base)
        system = build(model)
        if name == "rollout" and not device.startswith("cuda"):
            system, floors = _with_floor(model, system)
        results[name] = result = systems.measure(system, repeats, progress=progress)
        del system, model
        systems.release_device_memory()
        ratio = "" if name == "rollout" else f"{results['rollout'].tokens_per_s / result.tokens_per_s:.2f}x"
        print(
            f"  {label:58s} {result.tokens:7d} {result.seconds:8.2f} {result.tokens_per_s:9.1f}  {ratio}",
            flush=True,
        )
    if not floors:
        print(f"  matmul floor: not measured on {device}: {NO_CUDA_FLOOR}", flush=True)
        return Report(work, results, None)
    floor = statistics.median(floors[1:])  # the timed runs, not the warm-up
    wall = results["rollout"].seconds
    print(
        f"  {'matmul floor (same runs: linears and MoE experts only)':58s} {'':7s} {floor:8.2f} {'':9s}  "
        f"rollout wall = {wall / floor:.2f}x the floor",
        flush=True,
    )
    return Report(work, results, floor)


def _progress(system: str, message: str) -> None:
    """On stderr: the table on stdout stays the results alone (phase d1 reads a cut-off run's table)."""
    print(f"rollout bench: {system}: {message}", file=sys.stderr, flush=True)


def _with_floor(model: PreTrainedModel, system: systems.System) -> tuple[systems.System, list[float]]:
    """`system`, timing the model's linear layers during each run: wall and floor under the same load."""
    floors: list[float] = []

    def run() -> int:
        tokens = 0

        def inner() -> None:
            nonlocal tokens
            tokens = system()

        floors.append(linear_seconds(model, inner))
        return tokens

    return run, floors


def run_workloads(
    base: PreTrainedModel,
    prompts: list[list[int]],
    n: int,
    new: int,
    names: list[str],
    baselines: list[str],
    device: str,
    repeats: int,
) -> dict[str, Report]:
    """The "fixed" and/or "variable" workload over the same prompts; the variable one on a copy of
    the model whose EOS logit is biased so lengths spread."""
    reports = {}
    for name in names:
        model, eos = base, None
        if name == "variable":
            model, eos = copy.deepcopy(base), workloads.model_eos_token_id(base)
            bias = workloads.spread_lengths(model, prompts, new)
            print(f"(variable lengths: EOS logit biased by {bias:+.2f})", flush=True)
        work = workloads.Workload(name, prompts, n, new, eos)
        reports[name] = run(model, work, baselines, device, repeats)
    return reports
