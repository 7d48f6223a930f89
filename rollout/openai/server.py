"""OpenAIServer: the FastAPI app under uvicorn on a thread of the `rollout serve` process.

It binds its socket itself (port 0 picks a free one, and the port is known before it serves) and
shares the gRPC server's EngineLoop and Metrics; stopping it stops only the HTTP side. With the gRPC
server's ServerTLS it serves HTTPS with the same certificate and key.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence

import uvicorn

from rollout.multimodal.image_parts import ImageLimits
from rollout.openai.app import build_app
from rollout.openai.frontend import Frontend
from rollout.server.app import ServerTLS
from rollout.server.engine_loop import EngineLoop
from rollout.server.metrics import Metrics

DEFAULT_MAX_BODY_BYTES = 64 * 2**20


class OpenAIServer:
    def __init__(
        self,
        loop: EngineLoop,
        metrics: Metrics | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        tool_call_parser: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_open_requests: int = 256,
        served_model_names: Sequence[str] | None = None,
        tls: ServerTLS | None = None,
        image_limits: ImageLimits | None = None,
    ):
        """`image_limits`: an image-text-to-text model's image parts (count, size, whether http(s) URLs are
        fetched: not by default)."""
        self.frontend = Frontend(loop, tool_call_parser, max_open_requests, served_model_names, image_limits)
        app = build_app(self.frontend, metrics or Metrics(loop), token, max_body_bytes)
        self.scheme = "https" if tls else "http"
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            ssl_certfile=tls.cert_file if tls else None,
            ssl_keyfile=tls.key_file if tls else None,
        )
        config.load()  # here, not on the server thread: a certificate that does not load raises to the caller
        self.socket = _bind(host, port)
        self.host, self.port = host, self.socket.getsockname()[1]
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self.socket]}, name="rollout-openai", daemon=True
        )

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/v1"

    def start(self, timeout: float = 30.0) -> OpenAIServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise OSError(f"the OpenAI server on {self.base_url} did not start")
            time.sleep(0.01)
        return self

    def wait_idle(self, timeout: float) -> bool:
        """Waits until no generate request is open (their responses written), at most `timeout` s; the
        port keeps answering meanwhile (503 once the engine loop stopped admitting)."""
        deadline = time.monotonic() + timeout
        while self.frontend.gate.open.total > 0:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Closes the port; responses still being written get `timeout` seconds, then are cut."""
        self._server.config.timeout_graceful_shutdown = max(timeout - 0.2, 0.0)  # uvicorn's 0.1 s ticks
        self._server.should_exit = True
        self._thread.join(timeout)
        self.frontend.shutdown()
        self.socket.close()

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    return sock
