"""Runner: the one seam between the engine and whatever runs the model (one device, or N ranks).

The engine builds its local `ModelRunner` and hands it to the `RunnerFactory` it was constructed
with; the factory returns what the engine drives from then on (the same runner on one device, a
tensor-parallel driver that fans each step out to its workers). The engine never learns which, and
never swaps its runner afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import torch
from transformers import PreTrainedModel

if TYPE_CHECKING:
    from rollout.engine.model_runner import ModelRunner
    from rollout.engine.scheduler import SchedulerOutput
    from rollout.weights.adapter_store import AdapterPlan


class Runner(Protocol):
    """What the engine calls: one step's forward, a weight write, and a shutdown; the model for reads."""

    @property
    def model(self) -> PreTrainedModel: ...

    @property
    def kv_caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]: ...

    def execute(self, sched: SchedulerOutput) -> torch.Tensor: ...

    def write_weights(self, plan: AdapterPlan) -> None:
        """Writes `plan.tensors`; a tensor-parallel runner sends every rank the update as sent, from
        which each merges its own adapter shards (rollout/distributed/sharded_weights.py)."""

    def shutdown(self) -> None: ...


RunnerFactory = Callable[["ModelRunner"], Runner]


def single_device(runner: ModelRunner) -> Runner:
    """The default factory: the engine drives its local runner itself."""
    return runner
