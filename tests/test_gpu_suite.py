"""The GPU suite's dry run: every phase's code path runs on CPU with tiny shapes, so the suite cannot rot between leases."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("a", "b", "c", "d1", "d2", "e")


@pytest.mark.slow
def test_the_cpu_dry_run_runs_every_phase_and_assembles_the_docs_section(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path)}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_suite.sh"), "--cpu-dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    for phase in PHASES:
        result = json.loads((tmp_path / f"phase_{phase}.json").read_text())
        assert "error" not in result, f"phase {phase} crashed:\n{result.get('error')}\n{proc.stderr[-3000:]}"
        assert result["dry_run"] and result["seconds"] < 180
    section = (tmp_path / "benchmarks_section.md").read_text()
    assert all(f"### Phase {phase} on" in section for phase in PHASES)


def test_an_unknown_phase_is_refused_by_name() -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_suite.sh"), "--cpu-dry-run", "z"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "unknown argument 'z'" in proc.stderr


def test_assembling_twice_replaces_the_section_instead_of_appending(tmp_path: Path) -> None:
    (tmp_path / "phase_a.md").write_text("| x |\n")
    (tmp_path / "phase_a.json").write_text(json.dumps({"phase": "a", "device": "cpu"}))
    doc = tmp_path / "doc.md"
    doc.write_text("# Benchmarks\n\nkept\n")
    for _ in range(2):
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.gpu_suite.main",
            "--assemble",
            "--out",
            str(tmp_path),
            "--into",
            str(doc),
        ]
        subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nkept\n") and text.count("## GPU suite") == 1
