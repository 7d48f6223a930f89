"""A replica that starts while the fleet sleeps starts asleep, as the fleet is (never silently awake).

Ray Serve replaces a dead replica with a fresh engine, awake. The fleet's sleep state is in its
ledger (fleet_sleep.py records it); a new replica reads it after replaying the weight updates and
sleeps at the same level, then wakes what the fleet has woken since, so that every replica answers
IsSleeping alike and the fleet's next WakeUp (or, after level 2, weight update) wakes it with the rest.
"""

from __future__ import annotations

from typing import Any

import ray

from rollout.engine.sleep.engine_memory import TAGS
from rollout.fleet.weight_ledger import NAMESPACE
from rollout.server.sleep_control import sleep, wake_up


def sleep_like_fleet(loop: Any, ledger_name: str) -> None:
    state = ray.get(ray.get_actor(ledger_name, namespace=NAMESPACE).sleep_state.remote())
    if state is None:
        return
    level, asleep = state
    sleep(loop, level)
    awake = [tag for tag in TAGS if tag not in asleep]
    if awake:
        wake_up(loop, awake)
