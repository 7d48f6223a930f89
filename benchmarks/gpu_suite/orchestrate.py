"""Runs the phases of a device call one process each, under their time boxes (plan.py).

A phase past its deadline skips what is left and writes its report itself; a process still running
GRACE seconds later (a hung kernel, a stuck server) is killed with its children and its report written
here, as is one that died without writing it: one slow or broken phase never costs the call's other results.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.gpu_suite.plan import DRY_RUN_SCALE, GRACE, MIN_BOX, STOPS_THE_CALL, call_seconds, time_box
from benchmarks.gpu_suite.report import Context, skipped, write_phase


def run_call(
    names: list[str], out: Path, dry_run: bool, seconds: float | None = None, grace: float = GRACE
) -> int:
    """Runs `names` in order within `seconds` (default: their reservations, DRY_RUN_SCALE times over
    in a dry run); 1 when any phase failed."""
    planned = call_seconds(names) * (DRY_RUN_SCALE if dry_run else 1.0)
    end = time.monotonic() + (planned if seconds is None else seconds)
    status, stop, summary = 0, None, []
    for i, name in enumerate(names):
        box = time_box(end - time.monotonic(), names[i + 1 :])
        reason = stop or (None if box >= MIN_BOX else f"{box:.0f} s left for it in the call")
        if reason is not None:
            write_phase(Context(out, dry_run), name, {"device": "-", "skipped": reason}, skipped(reason))
            print(f"phase {name}: {skipped(reason)}", flush=True)
            summary.append(f"{name} skipped")
            continue
        start = time.monotonic()
        failed = run_boxed(name, out, dry_run, box - grace, box)
        summary.append(f"{name} {'FAILED' if failed else 'ok'} {time.monotonic() - start:.0f}/{box:.0f} s")
        status |= failed
        if failed and name == STOPS_THE_CALL:
            stop = f"phase {name} failed: fix the environment first"
    print("phases: " + " | ".join(summary), flush=True)  # the last lines a device call's reply shows
    return status


def run_boxed(name: str, out: Path, dry_run: bool, seconds: float, limit: float) -> int:
    """Phase `name` in its own process with `seconds` to run, killed at `limit`; 1 when it failed."""
    report = out / f"phase_{name}.json"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "benchmarks.gpu_suite.main", "--phase", name, "--seconds", f"{seconds:.1f}"]
    cmd += ["--out", str(out)] + (["--dry-run"] if dry_run else [])
    return run_process(cmd, limit, lambda why: write_failure(out, name, dry_run, why), report)


def run_process(cmd: list[str], limit: float, on_failure, report: Path) -> int:
    """Runs `cmd` (its own process group) for at most `limit` seconds; calls `on_failure(why)` when it was
    killed or exited without writing `report`."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        code = proc.wait(timeout=max(limit, 1.0))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the phase's own subprocesses (pytest, servers) with it
        proc.wait()
        on_failure(
            f"killed {time.monotonic() - start:.0f} s after it started: past its time box of {limit:.0f} s"
        )
        return 1
    if not report.exists():
        on_failure(f"exited with status {code} without writing its report (see the suite log)")
        return 1
    return 1 if code else 0


def write_failure(out: Path, name: str, dry_run: bool, why: str) -> None:
    """Phase `name`'s report with `why` as its error, keeping what its last checkpoint holds."""
    report = out / f"phase_{name}.json"
    data, markdown = {"device": "- (killed before its first report)"}, ""
    if report.exists():  # a checkpoint (Context.checkpoint): the cases that ended before the kill
        data = {k: v for k, v in json.loads(report.read_text()).items() if k not in _WRITTEN}
        markdown = data.pop("markdown", "") + "\n\n"
    write_phase(Context(out, dry_run), name, {**data, "error": why}, f"{markdown}FAILED: {why}")
    print(f"phase {name}: FAILED: {why}", flush=True)


_WRITTEN = ("phase", "dry_run")  # write_phase's own keys (the device is the checkpoint's)
