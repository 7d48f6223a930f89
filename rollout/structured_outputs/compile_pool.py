"""CompilePool: the server's grammar compiles, bounded in time and in number.

xgrammar compiles in C++ and cannot be interrupted: a 20,000-property JSON schema got no answer in
120 s and a 301 KB regex took 52 s, each holding a server thread and a core. So a server first compiles
each new spec in a helper process (compile_server.py, which forks a child per compile from a small
process that imported xgrammar once): at most `workers` at once (a compile waits up to `timeout_s` for a
turn, else `CompilersBusyError`: RESOURCE_EXHAUSTED / 429), killed after `timeout_s`: refused naming
the field (ValueError: INVALID_ARGUMENT / 400), nothing cached. A spec the helper compiled in time is
compiled again in the server's process, which takes as long: a compiled grammar does not cross
processes (its serialized form held 394 MB and took 103 s to write for a 1,000-property schema whose
compile took 0.25 s). One helper serves the whole process; its start (an import of xgrammar and
torch, seconds) happens on the first structured request and is not counted against the bound.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from rollout.structured_outputs.compile_server import CRASHED, CUT
from rollout.structured_outputs.structured_outputs import StructuredOutputsParams

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_WORKERS = 2
_START_TIMEOUT_S = 600.0  # the helper's start: it imports xgrammar (and torch) once
_HELPER_GRACE_S = 5.0  # past a compile's bound, how long the helper may take to say it killed it


@dataclass(frozen=True)
class CompileLimits:
    """How long one compile may take (`rollout serve --structured-compile-timeout`) and how many run at
    once (`--structured-compile-workers`)."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    workers: int = DEFAULT_WORKERS

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"structured compile timeout must be > 0 s, got {self.timeout_s}")
        if self.workers < 1:
            raise ValueError(f"structured compile workers must be at least 1, got {self.workers}")


DEFAULT_LIMITS = CompileLimits()  # a server's, unless told otherwise


class CompilersBusyError(RuntimeError):
    """Every compile turn stayed taken for the whole bound: retry later (RESOURCE_EXHAUSTED / 429)."""

    retry_after_s = 1


class CompilePool:
    """Compiles for one tokenizer (`tokenizer_info`, an xgrammar.TokenizerInfo) within `limits`; every
    pool of the process shares one helper."""

    def __init__(self, tokenizer_info: Any, limits: CompileLimits) -> None:
        self.limits = limits
        self._info_json = tokenizer_info.serialize_json()
        self._key = hashlib.sha256(self._info_json.encode()).hexdigest()
        self._turns = threading.BoundedSemaphore(limits.workers)

    def compile(self, spec: StructuredOutputsParams, compile_here: Callable[[], T]) -> T:
        """`compile_here()` (the same compile, in this process) once the helper compiled `spec` within
        the bound; ValueError naming the field if it does not compile or not in time, CompilersBusyError
        if no turn freed up within the bound. The turn is held until `compile_here` returns."""
        kind, limit = spec.kind, self.limits.timeout_s
        if not self._turns.acquire(timeout=limit):
            raise CompilersBusyError(
                f"structured_outputs.{kind}: {self.limits.workers} grammar compiles are running, the "
                "server's limit (--structured-compile-workers); retry"
            )
        try:
            answer = _helper().check(self._key, self._info_json, spec, limit)
            if answer == CUT:
                raise ValueError(
                    f"structured_outputs.{kind}: did not compile within {limit:g} s, the server's bound "
                    "(--structured-compile-timeout); a smaller schema or grammar compiles faster"
                )
            if answer == CRASHED:
                raise ValueError(f"structured_outputs.{kind}: the grammar compiler crashed on it")
            if answer is not None:
                raise ValueError(answer)
            return compile_here()
        finally:
            self._turns.release()


class _Helper:
    """The compile helper process, its pipes and the compiles waiting for an answer."""

    def __init__(self, process: subprocess.Popen, requests: Connection, replies: Connection) -> None:
        self.process, self.requests, self.replies = process, requests, replies
        self._tokenizers: set[str] = set()  # keys the helper has a compiler for
        self._waiting: dict[int, Future] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, name="grammar-compile-replies", daemon=True).start()

    @classmethod
    def start(cls) -> _Helper:
        to_helper, from_helper = os.pipe(), os.pipe()
        command = [sys.executable, "-m", "rollout.structured_outputs.compile_server"]
        process = subprocess.Popen(
            [*command, str(to_helper[0]), str(from_helper[1])],
            pass_fds=(to_helper[0], from_helper[1]),
            stdin=subprocess.DEVNULL,
        )
        os.close(to_helper[0])
        os.close(from_helper[1])
        requests = Connection(to_helper[1], readable=False)
        replies = Connection(from_helper[0], writable=False)
        if not replies.poll(_START_TIMEOUT_S) or replies.recv() != "ready":
            process.kill()
            raise ValueError("structured_outputs: the grammar compile helper did not start")
        return cls(process, requests, replies)

    def alive(self) -> bool:
        return self.process.poll() is None

    def check(self, key: str, info_json: str, spec: StructuredOutputsParams, timeout_s: float) -> str | None:
        """The helper's answer: None (compiled in time), an error message, CUT or CRASHED."""
        future: Future = Future()
        with self._lock:
            if key not in self._tokenizers:
                self.requests.send(("tokenizer", key, info_json))
                self._tokenizers.add(key)
            request_id = next(self._ids)
            self._waiting[request_id] = future
            self.requests.send(("compile", request_id, key, spec, timeout_s))
        try:
            return future.result(timeout_s + _HELPER_GRACE_S)
        except FutureTimeoutError:  # the helper itself stopped answering: the next compile starts another
            self.process.kill()
            return CUT

    def _read(self) -> None:
        while True:
            try:
                request_id, answer = self.replies.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._waiting.pop(request_id, None)
            if future is not None:
                future.set_result(answer)
        with self._lock:  # the helper died: every waiting compile ends as if its child had
            for future in self._waiting.values():
                future.set_result(CRASHED)
            self._waiting.clear()


_helper_lock = threading.Lock()
_helpers: list[_Helper] = []  # the process's one helper, once started (a dead one is replaced)


def _helper() -> _Helper:
    with _helper_lock:
        if not _helpers or not _helpers[0].alive():
            _helpers[:] = [_Helper.start()]
        return _helpers[0]
