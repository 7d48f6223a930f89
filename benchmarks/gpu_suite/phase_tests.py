"""Phase b: the test suite's `gpu` tests and the Triton kernel tests, run for real on CUDA (no interpreter).

Runs in order of need, each a pytest subprocess with a JUnit report, stopped (SIGINT: pytest still writes
the report of what ran) at the phase's time box: the `gpu` tests of every test file that marks some (found
by grep, so a new one is never left out); the essential Triton tests (every kernel against the reference,
the cache writes, the model features end to end); then the rest of the Triton matrix if time is left.
On the GPU the Triton runs spread over pytest-xdist workers when the image has it (its compiles are CPU-bound).
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.gpu_suite.report import BENCHMARKS, Context, skipped, table

ROOT = BENCHMARKS.parent
TRITON_TESTS = ["tests/ops/test_triton_attention.py", "tests/ops/test_triton_models.py"]
ESSENTIAL = "match_reference or write_kv_cache or model_features or length_bound"
MIN_RUN = 20.0  # seconds: a run given less is skipped (pytest's start alone takes several)
STOP_GRACE = 15  # seconds pytest gets after SIGINT to write its report


def run(ctx: Context) -> tuple[dict, str]:
    collect = ["--co"] if ctx.dry_run else []  # interpreted Triton is slow on 2 cores: collect only
    workers = [] if ctx.dry_run or importlib.util.find_spec("xdist") is None else ["-n", "8"]
    runs = {
        "pytest -m gpu": ["-m", "gpu", *gpu_test_files()],
        "Triton kernels, essential": [*TRITON_TESTS, "-k", ESSENTIAL, *workers, *collect],
        "Triton kernels, the rest": [*TRITON_TESTS, "-k", f"not ({ESSENTIAL})", *workers, *collect],
    }
    results = {}
    for name, args in runs.items():
        results[name] = _pytest(args, ctx.seconds_left()) if ctx.allows(MIN_RUN) else {"not_run": skipped()}
        ctx.checkpoint({"runs": results}, _table(results))
    return {"runs": results}, _table(results)


def _table(results: dict[str, dict]) -> str:
    rows = [
        [n, r["not_run"]] if "not_run" in r
        else [n, len(r["tests"]), r["passed"], r["failed"], r["skipped"], r["stopped"], ", ".join(r["failures"][:5]) or "-"]
        for n, r in results.items()
    ]  # fmt: skip
    header = ["run", "tests", "passed", "failed", "skipped", "stopped at the box", "failures (first 5)"]
    return table(header, rows)


def gpu_test_files() -> list[str]:
    """Every test file that marks a test `gpu` (relative to the repository root)."""
    pattern = re.compile(r"pytest\.mark\.gpu\b")
    files = (ROOT / "tests").rglob("test_*.py")
    return sorted(str(f.relative_to(ROOT)) for f in files if pattern.search(f.read_text()))


def _pytest(args: list[str], seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *args]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        stopped = False
        try:
            output, _ = proc.communicate(timeout=max(1.0, seconds - STOP_GRACE))
        except subprocess.TimeoutExpired:
            stopped = True
            proc.send_signal(signal.SIGINT)  # pytest stops after the running test and writes the report
            try:
                output, _ = proc.communicate(timeout=STOP_GRACE - 2)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
        counts = _counts(report) if report.exists() else _no_report()
    counts.update(returncode=proc.returncode, stopped=stopped, tail=output[-2000:])
    if proc.returncode not in (0, 5) and not counts["failures"] and not stopped:  # 5: nothing collected
        counts["failures"] = [f"pytest exited {proc.returncode}"]
    if not counts["tests"] and args[-1] == "--co":
        counts["tests"] = re.findall(r"^(tests/\S+::\S+)$", output, re.MULTILINE)
    return counts


def _no_report() -> dict:
    return {"passed": 0, "failed": 0, "skipped": 0, "failures": [], "tests": []}


def _counts(report: Path) -> dict:
    counts = _no_report()
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.get("name") is None:  # the test SIGINT interrupted: neither passed nor failed
            continue
        name = f"{case.get('classname')}::{case.get('name')}"
        counts["tests"].append(name)
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            counts["failed"] += 1
            counts["failures"].append(name)
        elif "skipped" in tags:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def failed(data: dict) -> bool:
    """A failed test, or a run that broke; a run stopped at the box or skipped is reported, not failed."""
    runs = [r for r in data["runs"].values() if "returncode" in r]
    return any(r["failed"] or (r["returncode"] not in (0, 5) and not r["stopped"]) for r in runs)
