"""TRL's colocate mode over two training processes (torchrun, gloo on CPU): each process runs its own engine,
serving its own copy of the DDP-trained weights (followed when DDP re-points them), and with seeded sampling
the run equals server mode's, the same samples and the same losses, also when a GRPO group spans both
processes (num_generations 8 over two slices of 4: each process generates the group whole, keeps its half)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from trl_builders import free_port, save_model_dir, start_server  # noqa: E402

from tests.serve_process import announced_address, stop_server  # noqa: E402

pytestmark = pytest.mark.slow  # two training processes per run, and a `rollout serve` process

WORKER = Path(__file__).with_name("colocate_worker.py")
REPO = WORKER.parents[2]


def train(tmp_path: Path, num_generations: int, where: str) -> dict:
    """Two processes of colocate_worker.py; the main process's logged metrics."""
    out = tmp_path / f"{where.replace(':', '_')}_{num_generations}.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    command += ["--master_port", str(free_port()), str(WORKER), str(out), str(num_generations), where]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("num_generations", [4, 8], ids=["groups-per-process", "a-group-across-processes"])
def test_two_colocated_processes_train_as_server_mode(tmp_path: Path, num_generations: int) -> None:
    model_dir = save_model_dir(tmp_path / "served", seed=0)
    process = start_server(model_dir, 0, tmp_path / "serve.log")
    try:
        served = train(tmp_path, num_generations, announced_address(process, tmp_path / "serve.log"))
    finally:
        stop_server(process)
    colocated = train(tmp_path, num_generations, "colocate")
    assert colocated["num_processes"] == 2 and colocated["shared"] is True
    for same_tokens in ("reward", "completions/mean_length"):
        assert colocated[same_tokens] == served[same_tokens]
    assert colocated["loss"] == pytest.approx(served["loss"], rel=1e-5, abs=1e-6)
    for bound in ("min", "max"):
        assert colocated[f"sampling/importance_sampling_ratio/{bound}"] == pytest.approx([1.0, 1.0], abs=1e-3)
