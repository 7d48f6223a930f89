"""`rollout` as a process: help and version answer without importing torch; Ctrl-C is one line, 130."""

from __future__ import annotations

import signal
import subprocess
import sys

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
    """Interrupted while it waits for its input: no traceback, the shell's status for SIGINT."""
    code = "import sys, rollout.cli; print('ready', flush=True); sys.exit(rollout.cli.main(sys.argv[1:]))"
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
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert err.strip() == "rollout: interrupted"
