"""A command run as the program freezes its start-up heap (and leaves nothing reported at exit); the
same command called in-process, by code that keeps the process, freezes nothing."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from rollout.cli import main as cli_main

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH = ["bench", "--prompts", "2", "--n", "2", "--new", "3", "--repeats", "1", "--workloads", "fixed"]


def test_a_command_called_in_process_freezes_nothing(tmp_path: Path) -> None:
    before = gc.get_freeze_count()
    assert cli_main([*BENCH, "--compare", "generate_static", "--json", str(tmp_path / "b.json")]) == 0
    assert gc.get_freeze_count() == before == 0


def test_the_program_freezes_its_start_up_heap_and_exits_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "rollout.cli", "--log-level", "DEBUG", *BENCH, "--compare"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    frozen = [line for line in result.stderr.splitlines() if "start-up objects" in line]
    assert len(frozen) == 1 and int(frozen[0].split("froze ")[1].split()[0]) > 100_000
    assert "leaked" not in result.stderr  # extension types report objects still frozen at exit
