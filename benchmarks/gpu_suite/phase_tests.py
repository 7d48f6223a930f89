"""Phase b: the test suite's `gpu` tests and the Triton kernel tests, run for real on CUDA (no interpreter).

Each pytest run is a subprocess with a JUnit report; the phase reports counts and the failed tests' names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.gpu_suite.report import Context, table

TRITON_TESTS = ["tests/ops/test_triton_attention.py", "tests/ops/test_triton_models.py"]
# the dry run collects only the files holding gpu tests (they skip without CUDA): the path, not the verdict
DRY_RUN_GPU_FILES = ["tests/engine/test_cuda_graphs.py", "tests/engine/test_sampler.py"]


def run(ctx: Context) -> tuple[dict, str]:
    runs = {
        "pytest -m gpu": ["-m", "gpu", *(DRY_RUN_GPU_FILES if ctx.dry_run else ["tests"])],
        "Triton kernels": TRITON_TESTS if not ctx.dry_run else [TRITON_TESTS[0], "-k", "decode", "-x"],
    }
    if ctx.dry_run:
        runs["Triton kernels"] += ["--co"]  # interpreted Triton is slow on 2 cores: collect only
    results = {name: _pytest(args) for name, args in runs.items()}
    rows = [
        [n, r["passed"], r["failed"], r["skipped"], ", ".join(r["failures"][:5]) or "-"]
        for n, r in results.items()
    ]
    return {"runs": results}, table(["run", "passed", "failed", "skipped", "failures (first 5)"], rows)


def _pytest(args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=540)
        counts = (
            _counts(report) if report.exists() else {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
        )
    counts["returncode"] = proc.returncode
    counts["tail"] = proc.stdout[-2000:]
    if proc.returncode not in (0, 5) and not counts["failures"]:  # 5: nothing collected
        counts["failures"] = [f"pytest exited {proc.returncode}"]
    return counts


def _counts(report: Path) -> dict:
    passed = failed = skipped = 0
    failures = []
    for case in ET.parse(report).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            failed += 1
            failures.append(f"{case.get('classname')}::{case.get('name')}")
        elif "skipped" in tags:
            skipped += 1
        else:
            passed += 1
    return {"passed": passed, "failed": failed, "skipped": skipped, "failures": failures}


def failed(data: dict) -> bool:
    return any(r["failed"] or r["returncode"] not in (0, 5) for r in data["runs"].values())
