"""`rollout` as a process: help and version answer without importing torch; Ctrl-C is one line, 130."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.serve_process import REPO_ROOT

TORCH_LOADED = "import sys, runpy; sys.argv = ['rollout', *sys.argv[1:]]\ntry:\n    runpy.run_module('rollout.cli', run_name='__main__')\nfinally:\n    print('torch' in sys.modules, file=sys.stderr)"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["serve", "--help"],
        ["generate", "--help"],
        ["bench", "--help"],
        ["demo", "--help"],
        ["--version"],
    ],
    ids=str,
)
def test_help_and_version_do_not_import_torch(argv: list[str]) -> None:
    """torch takes seconds to import; --help must answer at once (it took 7-16 s)."""
    done = subprocess.run(
        [sys.executable, "-c", TORCH_LOADED, *argv],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "False"


def test_version_prints_the_package_version() -> None:
    from importlib.metadata import version

    done = subprocess.run(
        [sys.executable, "-m", "rollout.cli", "--version"], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert done.returncode == 0 and done.stdout.strip() == f"rollout {version('rollout')}"


def test_ctrl_c_exits_130_with_one_line() -> None:
    """Interrupted while it waits for its input: no traceback, the shell's status for SIGINT.

    The child starts with SIGINT at Python's default, as a shell's foreground job does: a test process
    that inherited SIGINT ignored (a suite run in the background by a script) passes that on, and
    Ctrl-C then rightly does nothing (it failed that way in the full suite)."""
    code = (
        "import signal, sys, rollout.cli; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "print('ready', flush=True); sys.exit(rollout.cli.main(sys.argv[1:]))"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, "generate", "--server", "127.0.0.1:1", "-i", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        assert process.stdout.readline() == "ready\n"
        _wait_until_reading_stdin(process.pid)  # a SIGINT before main() runs would be Python's own
        process.send_signal(signal.SIGINT)
        process.wait(timeout=300)  # stdin stays open: an end of input must not stand in for the signal
        err = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert err.strip() == "rollout: interrupted"


def _wait_until_reading_stdin(pid: int, timeout: float = 300.0) -> None:
    """Until the process blocks in read(0, ...) (Linux: /proc/<pid>/syscall); elsewhere a fixed pause."""
    path = Path(f"/proc/{pid}/syscall")
    if not path.exists():
        time.sleep(3.0)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = path.read_text().split()
        if len(fields) > 1 and fields[0] == "0" and int(fields[1], 16) == 0:  # read(2) on fd 0
            return
        time.sleep(0.05)
    raise AssertionError("the CLI never waited for its input")


TORCH_WATCH = """import runpy, sys
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            print("<torch import starts>", file=sys.stderr, flush=True)
            sys.meta_path.remove(self)
sys.meta_path.insert(0, Watch())
sys.argv = ["rollout", *sys.argv[1:]]
runpy.run_module("rollout.cli", run_name="__main__")
"""


def test_serve_says_it_is_loading_before_it_imports_torch(tmp_path: Path) -> None:
    """torch and transformers take 5-40 s to import: a server silent that long looked hung."""
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", TORCH_WATCH, "serve", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )
    try:
        deadline = time.monotonic() + 300  # a hang guard: the import starts within a second or two
        while "<torch import starts>" not in log.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    before_torch = log.read_text().split("<torch import starts>")[0]
    assert "INFO rollout.commands.serve: loading " in before_torch
    assert "the weights, the engine (CPU kernels, KV cache, self-check)" in before_torch
