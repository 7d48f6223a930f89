"""One replica's side of a fleet-wide weight update: stage, hold, commit or discard, release.

Stage validates the tensors against the engine (names, shapes, dtypes, the next version; LoRA factors
merged into the held base, which must be the one the fleet names) without writing a byte and keeps them; hold closes the replica's gate, so no new request reaches its engine
until release; commit writes them once the engine is idle (in-flight policy "wait": every sample
keeps one version) or after aborting what runs ("abort"). A hold left open by a coordinator that
went away lapses after `hold_timeout_s`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from rollout.weights.lora import LoraTargets
from rollout.weights.updater import check_next_version, plan_writes

FLEET_POLICIES = ("wait", "abort")


@dataclass(frozen=True)
class StagedUpdate:
    tensors: dict[str, Any]
    version: int
    lora: LoraTargets | None = None
    base_version: int | None = None


class WeightStage:
    def __init__(self, loop: Any, hold_timeout_s: float = 600.0) -> None:
        self.loop = loop  # rollout.server.engine_loop.EngineLoop
        self.hold_timeout_s = hold_timeout_s
        self.staged: dict[str, StagedUpdate] = {}
        self._open = asyncio.Event()
        self._open.set()
        self._held_until = 0.0

    def stage(self, update_id: str, update: StagedUpdate) -> dict[str, bool]:
        """Validates and keeps the update; returns whether it merges into the held base (`relies`) and
        writes every weight of the model (`complete`). Raises naming the problem (a tensor, the
        version, another base held: BaseMismatchError)."""

        def validate(engine: Any) -> dict[str, bool]:
            check_next_version(engine.weight_version, update.version)
            plan = engine.weights.plan(update.tensors, update.lora)  # WeightUpdateError, nothing written
            engine.weights.adapters.check_base(plan, update.base_version)
            model = engine.weights.local_runner.model
            written = {target.data_ptr() for target, _ in plan_writes(model, plan.tensors)}
            every = {t.data_ptr() for t in model.state_dict(keep_vars=True).values()}
            return {"relies": bool(plan.relies_on_base), "complete": every <= written}

        view = self.loop.call(validate)
        self.staged[update_id] = update
        return view

    def hold(self) -> None:
        self._open.clear()
        self._held_until = time.monotonic() + self.hold_timeout_s

    def commit(self, update_id: str, in_flight: str = "wait") -> int:
        """Writes the staged update (the replica is held); returns the new version."""
        if in_flight not in FLEET_POLICIES:
            raise ValueError(
                f"in_flight must be one of {FLEET_POLICIES} for a fleet update, got {in_flight!r}"
            )
        update = self.staged.pop(update_id, None)
        if update is None:
            raise KeyError(f"update_id {update_id!r}: nothing staged under it on this replica")

        def write(engine: Any) -> int:
            return engine.update_weights(
                update.tensors, update.version, "wait", update.lora, update.base_version
            )

        return self.loop.run_exclusive(write, abort_running=in_flight == "abort")

    def discard(self, update_id: str) -> None:
        self.staged.pop(update_id, None)

    def release(self) -> None:
        self._open.set()

    async def wait_open(self) -> None:
        """Returns once the replica takes requests (at once unless a fleet update holds it)."""
        while not self._open.is_set():
            if time.monotonic() > self._held_until:
                self._open.set()
                break
            try:
                await asyncio.wait_for(self._open.wait(), timeout=1.0)
            except TimeoutError:
                continue
