"""ServerActor: one `rollout serve` process on the node Ray placed the actor on.

The actor owns the process (stdout and stderr in a log file on that node), reads back the address
the server announces once it listens (`--port 0`: the server binds a free port itself, so none is
picked and released), and stops it. Bound to 0.0.0.0, the server is announced at the node's IP so
a client on another node can reach it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import ray

ANNOUNCEMENT = "rollout serving "  # rollout/commands/serve.py: "rollout serving <model> on <address>"


class ServerActor:
    def __init__(self, serve_args: list[str], env: dict[str, str]) -> None:
        self.log_path = tempfile.mkstemp(prefix="rollout-serve-", suffix=".log")[1]
        command = [sys.executable, "-m", "rollout.cli", "serve", "--port", "0", *serve_args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}
            )

    def address(self, timeout: float) -> str:
        """host:port once the server listens; raises with the log's tail if it exits or stays silent."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_path, errors="replace") as log:
                for line in log:
                    if line.startswith(ANNOUNCEMENT):
                        return self._reachable(line.rsplit(" on ", 1)[-1].strip())
            if self.process.poll() is not None:
                raise RuntimeError(f"rollout serve exited with {self.process.returncode}: {self.log_tail()}")
            time.sleep(0.05)
        raise TimeoutError(f"rollout serve announced no address within {timeout:g} s: {self.log_tail()}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15.0, kill: bool = False) -> None:
        """Terminates the server (SIGTERM: it answers running requests, their samples cut with
        finish_reason "abort"; SIGKILL after `timeout` s, or at once with `kill`) and removes its log."""
        if self.process.poll() is None:
            if kill:
                self.process.kill()
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if os.path.exists(self.log_path):
            os.remove(self.log_path)

    def log_tail(self, chars: int = 2000) -> str:
        with open(self.log_path, errors="replace") as log:
            return log.read()[-chars:]

    @staticmethod
    def _reachable(address: str) -> str:
        host, port = address.rsplit(":", 1)
        if host in ("0.0.0.0", "[::]", "::"):
            host = ray.util.get_node_ip_address()
        return f"{host}:{port}"
