"""Server metrics in the Prometheus text exposition format (0.0.4), from GetMetrics or over HTTP.

Prometheus text needs no extra dependency and every scraper reads it. Figures come from the engine
loop's stats snapshot (refreshed after every engine step), so rendering never waits for the engine.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
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
        f = Figures(self.loop.stats(), dict(self.loop.counters), self)
        lines: list[str] = []
        for metric in METRICS:
            lines += metric.lines(f)
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Figures:
    """One scrape's inputs: the loop's stats snapshot and counters, and the Metrics that renders them."""

    stats: dict[str, int | float]
    counters: dict[str, int]
    metrics: Metrics

    @property
    def blocks_total(self) -> int:
        return max(int(self.stats["num_blocks_total"]), 1)

    @property
    def prefix_hit_rate(self) -> float:
        hits, computed = (
            int(self.stats["num_prefix_hit_tokens"]),
            int(self.stats["num_prompt_tokens_computed"]),
        )
        return round(hits / max(hits + computed, 1), 6)


@dataclass(frozen=True)
class Metric:
    """One exposed series: `value` gives a number, or {label value: number} for a series with `label`."""

    name: str
    kind: str  # "counter" | "gauge"
    help: str
    value: Callable[[Figures], float | int | dict[str, float | int]]
    label: str | None = None

    def lines(self, f: Figures) -> list[str]:
        name = f"rollout_{self.name}"
        help_text = self.help.format(window_s=f.metrics.window_s)  # the one help that names a setting
        out = [f"# HELP {name} {help_text}", f"# TYPE {name} {self.kind}"]
        value = self.value(f)
        if self.label is None:
            return [*out, f"{name} {value}"]
        return out + [f'{name}{{{self.label}="{key}"}} {v}' for key, v in value.items()]


def _stat(key: str) -> Callable[[Figures], int | float]:
    return lambda f: f.stats[key]


def _counter(key: str) -> Callable[[Figures], int]:
    return lambda f: f.counters[key]


def _tokens_per_second(f: Figures) -> float:
    return round(f.metrics.tokens_per_second(int(f.stats["num_generated_tokens"])), 3)


METRICS: tuple[Metric, ...] = (
    Metric("requests_total", "counter", "Requests accepted.", _counter("accepted")),
    Metric("requests_finished_total", "counter", "Requests finished (incl. aborted).", _counter("finished")),
    Metric("requests_failed_total", "counter", "Requests failed by an engine error.", _counter("failed")),
    Metric(
        "requests_rejected_total",
        "counter",
        "Requests refused at admission.",
        lambda f: {
            "queue_full": f.counters["rejected_full"],
            "unavailable": f.counters["rejected_unavailable"],
        },
        label="reason",
    ),
    Metric(
        "requests_deduplicated_total",
        "counter",
        "Retries served without generating again.",
        _counter("deduplicated"),
    ),
    Metric(
        "requests_running",
        "gauge",
        "Requests in the engine.",
        lambda f: f.stats["num_requests_unfinished"] - f.stats["num_requests_queued"],
    ),
    Metric(
        "requests_waiting",
        "gauge",
        "Requests queued for admission (paused or during a weight update).",
        _stat("num_requests_queued"),
    ),
    Metric(
        "sequences_running",
        "gauge",
        "Sequences (samples) the scheduler is running.",
        _stat("num_running_seqs"),
    ),
    Metric(
        "queue_depth",
        "gauge",
        "Sequences waiting in the scheduler plus queued requests.",
        lambda f: f.stats["num_waiting_seqs"] + f.stats["num_requests_queued"],
    ),
    Metric("generated_tokens_total", "counter", "Tokens generated.", _stat("num_generated_tokens")),
    Metric(
        "generation_tokens_per_second",
        "gauge",
        "Generated tokens/s over the last {window_s:g} s of scrapes (since start at first).",
        _tokens_per_second,
    ),
    Metric(
        "prompt_tokens_computed_total",
        "counter",
        "Prompt tokens run through the model.",
        _stat("num_prompt_tokens_computed"),
    ),
    Metric(
        "prefix_hit_tokens_total",
        "counter",
        "Prompt tokens served from the prefix cache.",
        _stat("num_prefix_hit_tokens"),
    ),
    Metric(
        "prefix_cache_hit_rate",
        "gauge",
        "Prefix-hit tokens / all prompt tokens so far.",
        lambda f: f.prefix_hit_rate,
    ),
    Metric(
        "kv_cache_usage_ratio",
        "gauge",
        "Fraction of KV blocks held by requests.",
        lambda f: round(1 - int(f.stats["num_blocks_free"]) / f.blocks_total, 6),
    ),
    Metric("kv_cache_blocks_total", "gauge", "KV cache blocks.", lambda f: f.blocks_total),
    Metric(
        "state_slots_used",
        "gauge",
        "Hybrid models: sequences holding recurrent states (at most max_num_seqs).",
        _stat("num_state_slots"),
    ),
    Metric(
        "state_snapshots",
        "gauge",
        "Hybrid models: recurrent-state snapshots kept for prefix hits.",
        _stat("num_state_snapshots"),
    ),
    Metric(
        "preemptions_total", "counter", "Sequences preempted for lack of KV blocks.", _stat("num_preemptions")
    ),
    Metric("weight_version", "gauge", "Version of the weights serving now.", _stat("weight_version")),
    Metric(
        "in_flight_tokens_total",
        "counter",
        "Tokens in flight at in-flight weight updates: KV kept, KV recomputed, output returned partial.",
        lambda f: {
            a: f.stats.get(f"in_flight_tokens_{a}", 0) for a in ("kept", "recomputed", "returned_partial")
        },
        label="action",
    ),
    Metric("paused", "gauge", "1 while paused.", lambda f: int(f.metrics.loop.paused)),
)


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
