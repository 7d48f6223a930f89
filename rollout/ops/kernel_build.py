"""Building a C++ extension once per machine and sources, shared by every install that has them.

The build folder is named by a digest of the sources (headers included), the flags, torch and Python,
so a trainer's venv and a server's venv, a clone and a checkout, load the same build instead of
rebuilding over each other (torch keys its folder by name alone and rebuilds when a path differs).
Builders take turns under an OS file lock, which dies with its holder, so a killed build never
blocks the next one; waiting has a deadline. A failed build is written down in the folder and not
retried until the compiler changes or the folder is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

logger = logging.getLogger(__name__)

FIRST_BUILD = "about 100 s on 2 cores"  # measured: 103 s wall, 132 CPU-seconds (README.md)


class BuildFailed(RuntimeError):
    """The extension cannot be built here; the message is one line and names where the log is."""


@dataclass(frozen=True)
class KernelBuild:
    name: str  # the module's name; also torch's TORCH_EXTENSION_NAME
    csrc: Path  # every file in it is hashed; `sources` are the ones compiled
    sources: tuple[str, ...]
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...] = ()

    def digest(self) -> str:
        h = hashlib.sha256()
        context = (torch.__version__, sys.version, sys.platform)
        for part in (*context, *self.sources, *self.cflags, *self.ldflags):
            h.update(part.encode() + b"\0")
        for path in sorted(p for p in self.csrc.iterdir() if p.is_file()):
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return h.hexdigest()[:16]

    def folder(self, root: Path) -> Path:
        return root / f"{self.name}_{self.digest()}"


def extensions_root() -> Path:
    """torch's own root for extension builds ($TORCH_EXTENSIONS_DIR, else the user's cache)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        return Path(root)
    from torch.utils.cpp_extension import get_default_build_root

    return Path(get_default_build_root())


def load_extension(build: KernelBuild, root: Path, wait_s: float = 600.0) -> ModuleType:
    """The built module: loaded from `root` when built before, else built there first (say so once)."""
    folder = build.folder(root)
    if (folder / "ok").exists():
        return _import(build.name, folder)
    _raise_if_failed_before(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with _BuildLock(root / f"{folder.name}.lock", wait_s):
        if (folder / "ok").exists():  # another process built it while we waited
            return _import(build.name, folder)
        _raise_if_failed_before(folder)
        return _build(build, folder)


def _build(build: KernelBuild, folder: Path) -> ModuleType:
    (folder / "lock").unlink(missing_ok=True)  # torch's own lock, left by a killed build: we hold ours
    logger.warning(
        "rollout: building the CPU kernels for this machine, once (%s; kept in %s)", FIRST_BUILD, folder
    )
    start = time.monotonic()
    try:
        from torch.utils.cpp_extension import load

        with _quiet_torch_build():
            module = load(
                build.name,
                [str(build.csrc / s) for s in build.sources],
                extra_cflags=list(build.cflags),
                extra_ldflags=list(build.ldflags),
                build_directory=str(folder),
            )
    except Exception as exc:
        (folder / "failed").write_text(f"compiler: {_compiler()}\n{exc}\n")
        raise BuildFailed(_summary(str(exc), folder / "failed")) from None
    (folder / "ok").write_text(f"built in {time.monotonic() - start:.0f} s\n")
    logger.debug("rollout: CPU kernels built in %.0f s", time.monotonic() - start)
    return module


@contextlib.contextmanager
def _quiet_torch_build() -> Iterator[None]:
    """torch's multi-line compiler warnings are not for the user; a failure's log keeps what matters."""
    torch_logger = logging.getLogger("torch.utils.cpp_extension")
    level = torch_logger.level
    torch_logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch_logger.setLevel(level)


def _raise_if_failed_before(folder: Path) -> None:
    failed = folder / "failed"
    if not failed.exists():
        return
    compiler, _, log = failed.read_text().partition("\n")
    if compiler != f"compiler: {_compiler()}":  # a compiler appeared or changed: try again
        failed.unlink(missing_ok=True)
        return
    raise BuildFailed(_summary(log, failed) + f"; delete {folder} to retry")


def _compiler() -> str:
    """The compiler torch's build would run ($CXX, else c++), resolved, or 'none'."""
    return shutil.which(os.environ.get("CXX", "c++")) or "none"


def _summary(log: str, path: Path) -> str:
    """One line: the log's first line that names an error (the first line if none does)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()] or ["unknown error"]
    details = [line for line in lines[1:] if "error" in line.lower() or "not found" in line.lower()]
    first = lines[0].rstrip(":")
    cause = f"{first}: {details[0]}" if details else first
    return f"{cause[:300]} (full log: {path})"


def _import(name: str, folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.so")
    if spec is None or spec.loader is None:
        raise BuildFailed(f"{folder / name}.so cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _BuildLock:
    """An exclusive flock on `path`: the OS releases it when its holder exits, however it exits, so a
    lock file left behind is free; a live holder is waited for until `wait_s`, then BuildFailed."""

    def __init__(self, path: Path, wait_s: float) -> None:
        self.path, self.wait_s, self.fd = path, wait_s, -1

    def __enter__(self) -> _BuildLock:
        import fcntl

        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + self.wait_s
        waited = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if not waited:  # a silent minute looks like a hang: say who it waits for
                    waited = True
                    logger.warning(
                        "rollout: another process is building the CPU kernels in %s; waiting for it "
                        "(up to %.0f s; %s for a first build)",
                        self.path.with_suffix(""),
                        self.wait_s,
                        FIRST_BUILD,
                    )
                if time.monotonic() >= deadline:
                    os.close(self.fd)
                    raise BuildFailed(
                        f"another process has been building in {self.path.with_suffix('')} for over "
                        f"{self.wait_s:.0f} s"
                    ) from None
                time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the flock
