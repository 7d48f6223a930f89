"""Runs a benchmarks/ script for a speed phase in its own process group under the phase's time box.

A script cut off by the box is killed with its children (a `rollout serve` it started) and what it printed
so far is returned with it: the speed phases parse the lines of the systems that finished.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks.gpu_suite.report import BENCHMARKS


@dataclass(frozen=True)
class BenchRun:
    result: dict | None  # what the script wrote with --json; None when it was cut off or broke
    stdout: str
    stopped: bool  # cut off at the time box

    def require(self, script: str) -> dict:
        """The script's JSON, or RuntimeError saying why there is none."""
        if self.result is None:
            why = "stopped at the time box" if self.stopped else "broke"
            raise RuntimeError(f"{script} {why}; its output:\n{self.stdout[-1500:]}")
        return self.result


def run_bench(script: str, args: list[str], seconds: float, json_out: bool = True) -> BenchRun:
    """benchmarks/<script> with `args` (and `--json` into a temporary file), for at most `seconds`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        cmd = [sys.executable, str(BENCHMARKS / script), *args, *(["--json", str(path)] if json_out else [])]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line as it is printed: partial results survive
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        try:
            stdout, _ = proc.communicate(timeout=max(1.0, seconds))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, _ = proc.communicate()
            return BenchRun(None, stdout, stopped=True)
        ok = proc.returncode == 0 and (path.exists() or not json_out)
        result = json.loads(path.read_text()) if ok and json_out else ({} if ok else None)
        return BenchRun(result, stdout, stopped=False)
