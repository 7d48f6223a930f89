"""The GPU suite (docs/gpu_suite.md) without a GPU: each device call's dry run runs every phase's code path on
CPU with tiny shapes, so the suite cannot rot between leases; the time boxes hold a slow phase to its share.
A dry run's boxes are the plan's many times over: they stop a hang, never a busy CPU (cut off under load)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.gpu_suite import orchestrate, phase_speed_grpo, phase_tests
from benchmarks.gpu_suite.plan import (
    CALL_TIMEOUT_S,
    CALLS,
    DRY_RUN_SCALE,
    OVERHEAD_SECONDS,
    call_seconds,
    time_box,
)

ROOT = Path(__file__).resolve().parent.parent
MAX_FILES_BACK = 8  # the device tool returns at most 8 files from $OUT per call
# a dry run's boxes (plan.DRY_RUN_SCALE) stop a hung phase; this only stops a hung script
DRY_RUN_HANG_S = max(call_seconds(list(names)) for names in CALLS.values()) * DRY_RUN_SCALE + 600


def suite(*args: str, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(out)}
    cmd = ["bash", str(ROOT / "scripts" / "gpu_suite.sh"), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=DRY_RUN_HANG_S)


def main(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "benchmarks.gpu_suite.main", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_calls_dry_run_writes_every_phase_report_within_the_files_that_come_back(
    call: int, tmp_path: Path
) -> None:
    proc = suite("--cpu-dry-run", "--call", str(call), out=tmp_path)
    for phase in CALLS[call]:
        result = json.loads((tmp_path / f"phase_{phase}.json").read_text())
        assert "error" not in result, f"phase {phase} crashed:\n{result.get('error')}\n{proc.stdout[-3000:]}"
        assert result["dry_run"] and "skipped" not in result
    section = (tmp_path / "benchmarks_section.md").read_text()
    assert all(f"### Phase {phase} on" in section for phase in CALLS[call])
    assert proc.returncode == 0 and len(list(tmp_path.iterdir())) <= MAX_FILES_BACK


def test_each_call_fits_its_run_timeout_with_the_install_and_the_assembly() -> None:
    """A phase's box includes the grace before its kill, so the reservations are the phases' whole time."""
    for call, names in CALLS.items():
        assert call_seconds(list(names)) + OVERHEAD_SECONDS <= CALL_TIMEOUT_S[call]


def test_time_a_phase_leaves_unused_goes_to_the_next_but_never_a_later_phases_share() -> None:
    assert time_box(400.0, ["h", "l"]) == 400.0 - call_seconds(["h", "l"])
    assert time_box(10.0, ["h"]) < 0  # the orchestrator skips a phase given less than MIN_BOX


def test_a_phase_past_its_time_box_marks_its_cases_skipped_and_still_writes_its_report(
    tmp_path: Path,
) -> None:
    proc = main("--phase", "c", "--seconds", "0", "--dry-run", "--out", str(tmp_path))
    result = json.loads((tmp_path / "phase_c.json").read_text())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert result["cases"] and all(c["error"].startswith("SKIPPED") for c in result["cases"])


def test_a_phase_process_past_its_hard_limit_is_killed_with_its_children_and_recorded(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    child = f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)"
    failures: list[str] = []
    start = time.monotonic()
    code = orchestrate.run_process(
        [sys.executable, "-c", child], 10.0, failures.append, tmp_path / "none.json"
    )  # 10 s: the child has started its own child and written its pid by then, even on a busy machine
    assert code == 1 and failures and failures[0].startswith("killed") and time.monotonic() - start < 60
    grandchild = Path(f"/proc/{pid_file.read_text()}/stat")
    deadline = time.monotonic() + 60
    while (
        grandchild.exists()
        and grandchild.read_text().split(") ")[1][0] not in "ZX"
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert not grandchild.exists() or grandchild.read_text().split(") ")[1][0] in "ZX"


def test_a_killed_phase_keeps_the_cases_its_last_checkpoint_holds(tmp_path: Path) -> None:
    phase = f"from pathlib import Path; from benchmarks.gpu_suite.report import Context; import time; Context(Path({str(tmp_path)!r}), True, phase='c').checkpoint({{'cases': ['llama']}}, 'the llama row'); time.sleep(120)"
    report = tmp_path / "phase_c.json"

    def record(why: str) -> None:
        orchestrate.write_failure(tmp_path, "c", True, why)

    assert orchestrate.run_process([sys.executable, "-c", phase], 10.0, record, report) == 1
    result = json.loads(report.read_text())
    assert result["cases"] == ["llama"] and result["error"].startswith("killed")
    assert "the llama row" in result["markdown"] and "FAILED: killed" in result["markdown"]


def test_a_failed_environment_phase_marks_the_rest_of_the_call_skipped(tmp_path: Path, monkeypatch) -> None:
    ran: list[str] = []
    monkeypatch.setattr(orchestrate, "run_boxed", lambda name, *args: ran.append(name) or int(name == "a"))
    assert orchestrate.run_call(list(CALLS[1]), tmp_path, dry_run=True) == 1
    assert ran == ["a"]
    for phase in CALLS[1][1:]:
        assert "phase a failed" in json.loads((tmp_path / f"phase_{phase}.json").read_text())["skipped"]


def test_the_gpu_run_selects_every_gpu_marked_test_the_batched_processors_included() -> None:
    files = phase_tests.gpu_test_files()
    cmd = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-m", "gpu", *files]
    listed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900).stdout
    assert "tests/engine/test_processor_batch.py" in files
    assert "test_the_processors_make_no_host_sync_per_row_on_cuda" in listed
    assert "test_the_processors_give_the_same_bits_on_cuda_as_on_the_cpu" in listed


def test_a_cut_off_grpo_run_reports_the_systems_it_printed() -> None:
    printed = """fixed: 32 prompts x n=8, prompt 256-256 tokens, exactly 256 new tokens (ignore_eos)
  system                                                      tokens  seconds     tok/s  rollout is
  rollout LLM.generate                                         65536     4.10   15984.4  
  transformers generate, all rows at once (left padding)       65536     9.80    6687.3  2.39x
"""
    found = phase_speed_grpo._printed(printed)
    assert found == {
        "rollout": {"tokens": 65536, "seconds": 4.1, "tokens_per_s": 15984.4},
        "generate_static": {"tokens": 65536, "seconds": 9.8, "tokens_per_s": 6687.3},
    }


def test_an_unknown_phase_is_refused_by_name() -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_suite.sh"), "--cpu-dry-run", "z"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "unknown argument 'z'" in proc.stderr


def test_assembling_twice_replaces_the_section_instead_of_appending(tmp_path: Path) -> None:
    report = {"phase": "a", "device": "cpu", "markdown": "| x |\n"}
    (tmp_path / "phase_a.json").write_text(json.dumps(report))
    doc = tmp_path / "doc.md"
    doc.write_text("# Benchmarks\n\nkept\n")
    for _ in range(2):
        main("--assemble", "--out", str(tmp_path), "--into", str(doc)).check_returncode()
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nkept\n") and text.count("## GPU suite") == 1 and "| x |" in text


def test_a_pipe_in_a_cell_or_a_header_does_not_split_the_markdown_row() -> None:
    from benchmarks.gpu_suite.report import table

    lines = table(["engine |dlp|", "n"], [["4/4 equal, |dlp| max 4.8e-07", 2]]).splitlines()
    assert [line.replace("\\|", "").count("|") for line in lines] == [3, 3, 3]
