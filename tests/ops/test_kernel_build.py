"""Kernel builds: one per sources' digest, shared by every install; a lock never blocks forever; a
failed build is remembered and said in one line. A tiny extension stands in for the kernels."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from rollout.ops import kernel_build
from rollout.ops.kernel_build import BuildFailed, KernelBuild, load_extension

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")

TINY = """#include <Python.h>
#define CAT(a, b) a##b
#define INIT(name) CAT(PyInit_, name)
#define STR2(x) #x
#define STR(x) STR2(x)
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, STR(TORCH_EXTENSION_NAME), nullptr, -1, nullptr};
PyMODINIT_FUNC INIT(TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&def); }
"""


def tiny_build(csrc: Path, name: str, header: str = "") -> KernelBuild:
    """An install's copy of a one-file extension at `csrc`."""
    csrc.mkdir(parents=True, exist_ok=True)
    (csrc / "tiny.cpp").write_text(TINY)
    (csrc / "tiny.h").write_text(header)
    return KernelBuild(name=name, csrc=csrc, sources=("tiny.cpp",), cflags=("-O0",))


def no_compiler(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))


@needs_compiler
def test_two_installs_with_the_same_sources_share_one_build(tmp_path, monkeypatch) -> None:
    """A trainer's venv and a server's venv: the second loads the first's build, compiling nothing."""
    root = tmp_path / "extensions"
    first = tiny_build(tmp_path / "trainer_venv" / "csrc", "tiny_shared")
    second = tiny_build(tmp_path / "server_venv" / "csrc", "tiny_shared")
    assert load_extension(first, root).__name__ == "tiny_shared"
    no_compiler(monkeypatch, tmp_path)  # a rebuild would fail now
    assert load_extension(second, root).__name__ == "tiny_shared"
    assert [p.name for p in root.iterdir() if p.is_dir()] == [first.folder(root).name]


def test_an_edited_header_changes_the_build_folder(tmp_path) -> None:
    before = tiny_build(tmp_path, "tiny", "inline int f() { return 1; }\n").folder(tmp_path)
    after = tiny_build(tmp_path, "tiny", "inline int f() { return 2; }\n").folder(tmp_path)
    assert before != after


def test_another_torch_version_builds_in_another_folder(tmp_path, monkeypatch) -> None:
    build = tiny_build(tmp_path, "tiny")
    before = build.folder(tmp_path)
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    assert build.folder(tmp_path) != before


@needs_compiler
def test_lock_files_left_by_a_killed_build_are_taken_over(tmp_path) -> None:
    """Both lock files, ours and torch's (torch waits on its own forever), are what a killed build
    leaves; the next build goes ahead."""
    root = tmp_path / "extensions"
    build = tiny_build(tmp_path / "csrc", "tiny_stale")
    folder = build.folder(root)
    folder.mkdir(parents=True)
    (folder / "lock").touch()
    (root / f"{folder.name}.lock").touch()
    done = threading.Event()
    worker = threading.Thread(target=lambda: (load_extension(build, root), done.set()), daemon=True)
    worker.start()
    worker.join(900)
    assert done.is_set()


def test_a_live_builder_is_waited_for_only_until_the_deadline(tmp_path) -> None:
    root = tmp_path / "extensions"
    build = tiny_build(tmp_path / "csrc", "tiny_busy")
    root.mkdir()
    held = os.open(root / f"{build.folder(root).name}.lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process, mid-build
        with pytest.raises(BuildFailed, match="another process has been building"):
            load_extension(build, root, wait_s=0.5)
    finally:
        os.close(held)


def test_a_process_waiting_for_another_builder_says_so_once(tmp_path, caplog) -> None:
    """A wait of up to ten minutes in silence looked like a hang."""
    root = tmp_path / "extensions"
    build = tiny_build(tmp_path / "csrc", "tiny_waiting")
    root.mkdir()
    held = os.open(root / f"{build.folder(root).name}.lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with caplog.at_level(logging.WARNING), pytest.raises(BuildFailed):
            load_extension(build, root, wait_s=1.0)
    finally:
        os.close(held)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "another process is building the CPU kernels" in message and "waiting for it" in message


def test_a_failed_build_is_remembered_and_said_in_one_line(tmp_path, monkeypatch) -> None:
    root = tmp_path / "extensions"
    build = tiny_build(tmp_path / "csrc", "tiny_failing")
    no_compiler(monkeypatch, tmp_path)
    with pytest.raises(BuildFailed) as first:
        load_extension(build, root)
    assert "\n" not in str(first.value) and "full log" in str(first.value)
    monkeypatch.setattr(kernel_build, "_build", lambda *_: pytest.fail("the failed build was retried"))
    with pytest.raises(BuildFailed, match="to retry") as again:
        load_extension(build, root)
    assert "\n" not in str(again.value)


@needs_compiler
def test_a_failed_build_is_retried_once_a_compiler_appears(tmp_path, monkeypatch) -> None:
    """The retry is a later process (this one's torch remembers what it tried)."""
    root = tmp_path / "extensions"
    build = tiny_build(tmp_path / "csrc", "tiny_retried")
    no_compiler(monkeypatch, tmp_path)
    with pytest.raises(BuildFailed):
        load_extension(build, root)
    monkeypatch.delenv("CXX")
    code = (
        "import sys; from pathlib import Path; from rollout.ops.kernel_build import KernelBuild, load_extension; "
        f"b = KernelBuild('tiny_retried', Path({str(build.csrc)!r}), ('tiny.cpp',), ('-O0',)); "
        f"print(load_extension(b, Path({str(root)!r})).__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.stdout.strip() == "tiny_retried", done.stderr


@needs_compiler
def test_a_build_is_announced_once_in_one_line(tmp_path, caplog) -> None:
    root = tmp_path / "extensions"
    build = tiny_build(tmp_path / "csrc", "tiny_announced")
    with caplog.at_level(logging.WARNING):
        load_extension(build, root)
        load_extension(build, root)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "building the CPU kernels" in message and "\n" not in message
