"""The fleet's /metrics: prefix hit rate over every replica, per-replica load and weight version.

Prometheus text from each replica's stats (`EngineLoop.stats()` plus its weight version), so one
scrape of the fleet's endpoint shows whether routing keeps prefixes where their blocks are (the hit
rate), whether load is even, whether every replica serves the same version, and which sleep.
"""

from __future__ import annotations

from typing import Any

PER_REPLICA = (
    ("rollout_fleet_replica_requests_unfinished", "gauge", "num_requests_unfinished"),
    ("rollout_fleet_replica_running_seqs", "gauge", "num_running_seqs"),
    ("rollout_fleet_replica_weight_version", "gauge", "weight_version"),
    ("rollout_fleet_replica_sleep_level", "gauge", "sleep_level"),  # 0: awake
    ("rollout_fleet_replica_prefix_hit_tokens_total", "counter", "num_prefix_hit_tokens"),
    ("rollout_fleet_replica_prompt_tokens_computed_total", "counter", "num_prompt_tokens_computed"),
    ("rollout_fleet_replica_generated_tokens_total", "counter", "num_generated_tokens"),
)


def prefix_hit_rate(stats: list[dict[str, Any]]) -> float:
    """Prompt tokens served from a prefix cache over all prompt tokens, fleet-wide."""
    hits = sum(int(s.get("num_prefix_hit_tokens", 0)) for s in stats)
    computed = sum(int(s.get("num_prompt_tokens_computed", 0)) for s in stats)
    return round(hits / max(hits + computed, 1), 6)


def render_fleet_metrics(stats: dict[str, dict[str, Any]]) -> str:
    """`stats`: replica id -> its stats."""
    rows = list(stats.values())
    versions = {int(s.get("weight_version", 0)) for s in rows}
    lines = [
        "# TYPE rollout_fleet_replicas gauge",
        f"rollout_fleet_replicas {len(rows)}",
        "# TYPE rollout_fleet_prefix_hit_rate gauge",
        f"rollout_fleet_prefix_hit_rate {prefix_hit_rate(rows)}",
        "# TYPE rollout_fleet_weight_versions gauge",  # distinct versions serving: 1 when uniform
        f"rollout_fleet_weight_versions {len(versions)}",
    ]
    for name, kind, key in PER_REPLICA:
        lines.append(f"# TYPE {name} {kind}")
        lines += [f'{name}{{replica="{r}"}} {int(s.get(key, 0))}' for r, s in sorted(stats.items())]
    return "\n".join(lines) + "\n"
