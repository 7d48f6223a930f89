"""The grammar compile helper process: `python -m rollout.structured_outputs.compile_server <in fd> <out fd>`.

It imports xgrammar once and keeps a compiler per tokenizer the server registers (`("tokenizer", key,
TokenizerInfo JSON)`); for each `("compile", id, key, spec, timeout_s)` it forks a child that compiles
the spec and answers; it kills a child still compiling after `timeout_s` and answers CUT for it. Forking from this small
single-threaded process costs milliseconds (the server's own process has many threads and must not
fork). Requests run concurrently; the server bounds how many (compile_pool.py). It exits, killing its
children, when the server closes the pipe.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

CUT = "\0cut"  # the answer for a compile killed at its deadline
CRASHED = "\0crashed"  # the child died without answering


@dataclass
class _Child:
    request_id: int
    pid: int
    conn: Connection
    deadline: float


def main(in_fd: int, out_fd: int) -> None:
    requests, replies = Connection(in_fd, writable=False), Connection(out_fd, readable=False)
    from rollout.structured_outputs.compile_spec import import_xgrammar

    xgr = import_xgrammar()
    compilers: dict[str, Any] = {}
    replies.send("ready")
    children: dict[Connection, _Child] = {}
    try:
        while True:
            timeout = min((c.deadline for c in children.values()), default=None)
            ready = wait(
                [requests, *children], None if timeout is None else max(timeout - time.monotonic(), 0)
            )
            if requests in ready:
                try:
                    message = requests.recv()
                except EOFError:
                    return
                if message[0] == "tokenizer":
                    _, key, info_json = message
                    info = xgr.TokenizerInfo.deserialize_json(info_json)
                    compilers[key] = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
                else:
                    _, request_id, key, spec, timeout_s = message
                    pid, conn = _fork_compile(compilers[key], spec)
                    children[conn] = _Child(request_id, pid, conn, time.monotonic() + timeout_s)
            for conn in [c for c in ready if c in children]:
                replies.send((children[conn].request_id, _answer(children.pop(conn))))
            now = time.monotonic()
            for conn in [c for c, child in children.items() if child.deadline <= now]:
                child = children.pop(conn)
                _kill(child)
                replies.send((child.request_id, CUT))
    finally:
        for child in children.values():
            _kill(child)


def _fork_compile(compiler: Any, spec: Any) -> tuple[int, Connection]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compile, answer, leave without running any of the parent's cleanup
        os.close(read_fd)
        from rollout.structured_outputs.compile_spec import compile_spec

        out = Connection(write_fd, readable=False)
        try:
            compile_spec(compiler, spec)
            out.send(None)
        except ValueError as exc:
            out.send(str(exc))
        finally:
            os._exit(0)
    os.close(write_fd)
    return pid, Connection(read_fd, writable=False)


def _answer(child: _Child) -> str | None:
    try:
        answer = child.conn.recv()
    except (EOFError, OSError):
        answer = CRASHED
    child.conn.close()
    os.waitpid(child.pid, 0)
    return answer


def _kill(child: _Child) -> None:
    try:
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    child.conn.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
