"""`rollout serve` as a child process for tests: its output goes to a log file, its address is read back.

With `--port 0` the server binds a free port itself and announces it, so no port is picked and then
released (another process could take it in between); reading a file never blocks, so a silent
server fails the test after a deadline instead of hanging it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ANNOUNCEMENT = "rollout serving "  # rollout/commands/serve.py: "rollout serving <model> on <address>"


def start_serve(args: list[str], log_path: Path) -> subprocess.Popen:
    """`python -m rollout.cli serve *args`, stdout and stderr into `log_path`; stop it with `stop_server`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "rollout.cli", "serve", *args]
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)


def announced_address(process: subprocess.Popen, log_path: Path, timeout: float = 600.0) -> str:
    """The address the child announces in its log once it listens. `timeout` only stops a hang: a start
    imports torch and transformers, loads and self-checks the model (a minute on 2 busy cores)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log_path.read_text(errors="replace").splitlines():
            if line.startswith(ANNOUNCEMENT):
                return line.split(" on ")[-1].strip()
        if process.poll() is not None:
            raise AssertionError(f"rollout serve exited with {process.returncode}: {log_tail(log_path)}")
        time.sleep(0.05)
    raise AssertionError(f"rollout serve announced no address within {timeout} s: {log_tail(log_path)}")


def log_tail(log_path: Path, chars: int = 2000) -> str:
    return log_path.read_text(errors="replace")[-chars:]


def stop_server(process: subprocess.Popen, timeout: float = 15.0) -> None:
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
