"""The live engine replicas of a fleet application, by Ray Serve replica id.

Ray Serve names each replica's actor `SERVE_REPLICA::<app>#<deployment>#<id>`; the named actors Ray
lists are the live ones, so a fan-out (weight updates, /metrics) addresses exactly those.
"""

from __future__ import annotations

import ray

DEPLOYMENT = "EngineReplica"


def live_replicas(app_name: str) -> list[str]:
    prefix = f"SERVE_REPLICA::{app_name}#{DEPLOYMENT}#"
    names = ray.util.list_named_actors(all_namespaces=True)
    return sorted(n["name"][len(prefix) :] for n in names if n["name"].startswith(prefix))
