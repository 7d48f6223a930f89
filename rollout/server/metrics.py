"""Server metrics in the Prometheus text exposition format (0.0.4), from GetMetrics or over HTTP.

Prometheus text needs no extra dependency and every scraper reads it. Figures come from the engine
loop's stats snapshot (refreshed after every engine step), so rendering never waits for the engine.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rollout.server.engine_loop import EngineLoop

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """Renders the loop's figures; keeps a short history of token counts for a tokens/s gauge."""

    def __init__(self, loop: EngineLoop, window_s: float = 30.0):
        self.loop = loop
        self.window_s = window_s
        # Seeded with the count at start, so the first scrape reports the rate since the server started.
        start = (time.monotonic(), int(loop.stats()["num_generated_tokens"]))
        self._history: deque[tuple[float, int]] = deque([start])
        self._lock = threading.Lock()

    def tokens_per_second(self, generated: int, now: float | None = None) -> float:
        """Generated tokens per second over the last `window_s` seconds of renders (or since start)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._history.append((now, generated))
            while len(self._history) > 2 and now - self._history[1][0] >= self.window_s:
                self._history.popleft()
            t0, g0 = self._history[0]
        return (generated - g0) / (now - t0) if now > t0 else 0.0

    def render(self) -> str:
        stats, counters = self.loop.stats(), dict(self.loop.counters)
        total = max(int(stats["num_blocks_total"]), 1)
        hits, computed = int(stats["num_prefix_hit_tokens"]), int(stats["num_prompt_tokens_computed"])
        lines: list[str] = []
        _add(lines, "requests_total", "counter", "Requests accepted.", counters["accepted"])
        _add(
            lines,
            "requests_finished_total",
            "counter",
            "Requests finished (incl. aborted).",
            counters["finished"],
        )
        _add(
            lines,
            "requests_failed_total",
            "counter",
            "Requests failed by an engine error.",
            counters["failed"],
        )
        _add(lines, "requests_rejected_total", "counter", "Requests refused at admission.", None)
        lines.append(f'rollout_requests_rejected_total{{reason="queue_full"}} {counters["rejected_full"]}')
        lines.append(
            f'rollout_requests_rejected_total{{reason="unavailable"}} {counters["rejected_unavailable"]}'
        )
        _add(
            lines,
            "requests_deduplicated_total",
            "counter",
            "Retries served without generating again.",
            counters["deduplicated"],
        )
        _add(
            lines,
            "requests_running",
            "gauge",
            "Requests in the engine.",
            stats["num_requests_unfinished"] - stats["num_requests_queued"],
        )
        _add(
            lines,
            "requests_waiting",
            "gauge",
            "Requests queued for admission (paused or during a weight update).",
            stats["num_requests_queued"],
        )
        _add(
            lines,
            "sequences_running",
            "gauge",
            "Sequences (samples) the scheduler is running.",
            stats["num_running_seqs"],
        )
        _add(
            lines,
            "queue_depth",
            "gauge",
            "Sequences waiting in the scheduler plus queued requests.",
            stats["num_waiting_seqs"] + stats["num_requests_queued"],
        )
        _add(lines, "generated_tokens_total", "counter", "Tokens generated.", stats["num_generated_tokens"])
        _add(
            lines,
            "generation_tokens_per_second",
            "gauge",
            f"Generated tokens/s over the last {self.window_s:g} s of scrapes (since start at first).",
            round(self.tokens_per_second(int(stats["num_generated_tokens"])), 3),
        )
        _add(
            lines, "prompt_tokens_computed_total", "counter", "Prompt tokens run through the model.", computed
        )
        _add(lines, "prefix_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.", hits)
        _add(
            lines,
            "prefix_cache_hit_rate",
            "gauge",
            "Prefix-hit tokens / all prompt tokens so far.",
            round(hits / max(hits + computed, 1), 6),
        )
        _add(
            lines,
            "kv_cache_usage_ratio",
            "gauge",
            "Fraction of KV blocks held by requests.",
            round(1 - int(stats["num_blocks_free"]) / total, 6),
        )
        _add(lines, "kv_cache_blocks_total", "gauge", "KV cache blocks.", total)
        _add(
            lines,
            "preemptions_total",
            "counter",
            "Sequences preempted for lack of KV blocks.",
            stats["num_preemptions"],
        )
        _add(lines, "weight_version", "gauge", "Version of the weights serving now.", stats["weight_version"])
        _add(
            lines,
            "in_flight_tokens_total",
            "counter",
            "Tokens in flight at in-flight weight updates: KV kept, KV recomputed, output returned partial.",
            None,
        )
        for action in ("kept", "recomputed", "returned_partial"):
            value = stats.get(f"in_flight_tokens_{action}", 0)
            lines.append(f'rollout_in_flight_tokens_total{{action="{action}"}} {value}')
        _add(lines, "paused", "gauge", "1 while paused.", int(self.loop.paused))
        return "\n".join(lines) + "\n"


def _add(lines: list[str], name: str, kind: str, help_text: str, value: float | int | None) -> None:
    lines.append(f"# HELP rollout_{name} {help_text}")
    lines.append(f"# TYPE rollout_{name} {kind}")
    if value is not None:
        lines.append(f"rollout_{name} {value}")


def serve_metrics_http(metrics: Metrics, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Serves GET /metrics on a daemon thread; returns the server (its port is server_address[1])."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # no per-scrape stderr noise
            return

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="rollout-metrics", daemon=True).start()
    return server
