"""`rollout bench` runs on the embedded model: every compared system does the same work on fixed
lengths, lengths spread on the variable workload, and the matmul floor is part of the run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from rollout.bench import systems
from rollout.bench.floor import linear_seconds, matmul_modules
from rollout.bench.workloads import Workload
from rollout.cli import main as cli_main
from tests.builders import char_tokenizer, random_prompts, tiny_model
from tests.server.hybrid_builders import save_hybrid


def bench(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "bench.json"
    argv = ["bench", "--prompts", "3", "--n", "2", "--repeats", "1", *args, "--json", str(out)]
    assert cli_main(argv) == 0
    return json.loads(out.read_text())


def test_bench_compares_systems_on_identical_token_counts(tmp_path: Path, capsys) -> None:
    report = bench(tmp_path, "--new", "5", "--workloads", "fixed", "--compare", "generate", "generate_static")
    results = report["fixed"]["results"]
    assert set(results) == {"rollout", "generate", "generate_static"}
    assert {r["tokens"] for r in results.values()} == {3 * 2 * 5}  # ignore_eos: fixed lengths everywhere
    assert report["fixed"]["matmul_floor_seconds"] > 0
    out = capsys.readouterr().out
    assert "all rows at once" in out and "x the floor" in out


def test_the_variable_workload_stops_samples_at_eos(tmp_path: Path) -> None:
    report = bench(tmp_path, "--new", "24", "--workloads", "variable", "--compare", "generate_static")
    for result in report["variable"]["results"].values():
        assert 3 * 2 <= result["tokens"] < 3 * 2 * 24  # EOS sampled: not every sample runs to the cap


def test_the_floor_is_the_linear_layers_share_of_one_run() -> None:
    model = tiny_model(seed=0)
    run = systems.rollout_engine(model, Workload("fixed", random_prompts(4, 5, 20), 2, 8, None), "cpu")
    run()
    start = time.perf_counter()
    floor = linear_seconds(model, run)
    assert 0 < floor < time.perf_counter() - start
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and not any(m._forward_hooks or m._forward_pre_hooks for m in linears)  # hooks removed


def test_bench_refuses_a_workload_longer_than_the_model_context() -> None:
    with pytest.raises(SystemExit, match="exceeds the model's context 64"):
        cli_main(["bench", "--prompt-len", "40", "50", "--new", "32"])


def test_the_floor_times_stacked_experts_as_matmuls_and_each_linear_once() -> None:
    """A MoE whose experts are stacked weights (grouped matmuls, no nn.Linear) counts them in the floor;
    nothing is timed twice."""
    model = tiny_model("qwen3_moe", seed=0)
    timed = matmul_modules(model)
    experts = [m for m in timed if not isinstance(m, torch.nn.Linear)]
    assert experts and all(type(m).__name__.endswith("Experts") for m in experts)
    assert len({id(m) for m in timed}) == len(timed)
    assert not any(isinstance(c, torch.nn.Linear) for m in experts for c in m.modules())


def test_the_parsers_baselines_are_the_benchmarks() -> None:
    """bench/command.py names them without importing the benchmark (it imports torch)."""
    from rollout.bench import command, side_by_side

    assert sorted(command.BASELINES) == sorted(side_by_side.BASELINES)


def test_a_hybrid_models_bench_skips_transformers_continuous_batching_saying_why(
    tmp_path: Path, capsys
) -> None:
    """transformers' generate_batch keeps attention caches only: it cannot run Nemotron-H's Mamba2 layers."""
    model = save_hybrid(tmp_path / "nemotron_h", "nemotron_h", char_tokenizer())
    report = bench(
        tmp_path, "--model", str(model), "--new", "4", "--prompt-len", "8", "16", "--workloads", "fixed"
    )
    assert set(report["fixed"]["results"]) == {"rollout", "generate_static", "generate"}
    assert "generate_batch: skipped, transformers' continuous batching cannot run" in capsys.readouterr().out


def test_a_model_without_a_context_length_is_benched_up_to_the_workloads_length(tmp_path: Path) -> None:
    model = save_hybrid(tmp_path / "mamba2", "mamba2", char_tokenizer())
    report = bench(
        tmp_path, "--model", str(model), "--new", "4", "--prompt-len", "8", "16", "--compare", "generate"
    )
    assert {r["tokens"] for r in report["fixed"]["results"].values()} == {3 * 2 * 4}


def test_the_static_baselines_logprobs_are_each_sampled_tokens_log_softmax() -> None:
    """Computed step by step (no [rows, steps, vocab] fp32 copy), equal to the stacked computation."""
    g = torch.Generator().manual_seed(0)
    rows, steps, vocab, width = 3, 5, 11, 4
    logits = tuple(torch.randn(rows, vocab, generator=g) for _ in range(steps))
    sampled = torch.randint(0, vocab, (rows, steps), generator=g)
    out = type(
        "Out", (), {"logits": logits, "sequences": torch.cat([torch.zeros(rows, width).long(), sampled], 1)}
    )
    expected = torch.log_softmax(torch.stack(logits, 1), -1).gather(-1, sampled[..., None])[..., 0]
    assert torch.equal(systems._sampled_logprobs(out, width), expected)


def test_each_system_is_built_after_the_previous_one_is_released(monkeypatch) -> None:
    """The engine's KV cache is sized from the free device memory: a baseline built beside a live
    engine ran out of memory on an H200 (phase d1). Each system gets the device to itself."""
    import weakref

    from rollout.bench import side_by_side

    engine_models: list[weakref.ref] = []
    alive_at_baseline: list[bool] = []
    real_engine, real_static = systems.rollout_engine, side_by_side.BASELINES["generate_static"]

    def engine(model, work, device):
        engine_models.append(weakref.ref(model))
        return real_engine(model, work, device)

    def static(model, work):
        alive_at_baseline.append(engine_models[0]() is not None)
        return real_static[1](model, work)

    monkeypatch.setattr(systems, "rollout_engine", engine)
    monkeypatch.setitem(side_by_side.BASELINES, "generate_static", (real_static[0], static))
    work = Workload("fixed", random_prompts(2, 5, 9), 2, 4, None)
    report = side_by_side.run(tiny_model(seed=0), work, ["generate_static"], "cpu", repeats=1)
    assert set(report.results) == {"rollout", "generate_static"}
    assert alive_at_baseline == [False]


def test_each_systems_build_and_runs_are_reported_on_stderr(capsys) -> None:
    """A baseline can take minutes on a CPU: the bench said nothing until its row. stdout keeps the table
    alone (phase d1 of the GPU suite reads a cut-off run's rows)."""
    from rollout.bench import side_by_side

    work = Workload("fixed", random_prompts(2, 5, 9), 2, 4, None)
    side_by_side.run(tiny_model(seed=0), work, ["generate_static"], "cpu", repeats=2)
    captured = capsys.readouterr()
    for system in (
        "fixed 1/2, rollout LLM.generate",
        "fixed 2/2, transformers generate, all rows at once (left padding)",
    ):
        for step in (
            "building, then a warm-up run and 2 timed runs",
            "warm-up run",
            "timed run 1/2",
            "timed run 2/2",
        ):
            assert f"rollout bench: {system}: {step}" in captured.err, (system, step)
    assert "rollout bench:" not in captured.out
