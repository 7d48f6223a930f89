"""One broadcast per step: rank 0 packs the step's inputs, every rank runs its shard of the forward.

`DriverRunner` stands where the engine's `ModelRunner` stood on rank 0: the scheduler and the
sampler never learn how many ranks there are. Each step it packs the scheduled batch on the host
(the same `prepare_inputs` the single-device runner uses), broadcasts it once over the gloo group,
and runs the forward like every worker; the model's own collectives (row-wise all-reduce, the
gathered `lm_head`) leave every rank with the full logits, and only rank 0 samples from them.
Workers loop in `serve_steps` until the driver's `Shutdown`.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass, fields, replace

import torch
from transformers import PreTrainedModel

from rollout.distributed import sharded_weights
from rollout.distributed.group import TPGroup
from rollout.engine.input_batch import ModelInputs, prepare_inputs
from rollout.engine.kv.kv_cache import copy_blocks
from rollout.engine.model_runner import ModelRunner
from rollout.engine.scheduler import SchedulerOutput
from rollout.weights.adapter_store import AdapterPlan, AdapterStore

HOST = torch.device("cpu")


@dataclass(frozen=True)
class Step:
    blocks_to_copy: list[tuple[int, int]]
    inputs: ModelInputs  # host tensors; each rank moves them to its device


@dataclass(frozen=True)
class Shutdown:
    pass


class DriverRunner:
    """Rank 0's runner: broadcasts each step and each weight update, then runs its own shard of it."""

    def __init__(
        self, runner: ModelRunner, group: TPGroup, workers: list[multiprocessing.process.BaseProcess]
    ) -> None:
        self.runner = runner
        self.group = group
        self.workers = workers
        self.closed = False

    @property
    def model(self) -> PreTrainedModel:
        return self.runner.model

    @property
    def kv_caches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.runner.kv_caches

    def execute(self, sched: SchedulerOutput) -> torch.Tensor:
        step = Step(sched.blocks_to_copy, prepare_inputs(sched, self.runner.block_size, HOST))
        self.group.broadcast_object(step)
        return run_step(self.runner, step)

    def write_weights(self, plan: AdapterPlan) -> None:
        sharded_weights.update_all_ranks(self.runner.model, plan, self.group)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Releases the workers from their loop, waits for them, and leaves the process group."""
        if self.closed:
            return
        self.closed = True
        try:
            self.group.broadcast_object(Shutdown())
        finally:
            for worker in self.workers:
                worker.join(timeout_s)
                if worker.is_alive():
                    worker.kill()
            self.group.close()


def serve_steps(runner: ModelRunner, group: TPGroup, adapters: AdapterStore) -> None:
    """A worker's life after loading: receive a message from rank 0, act on it, until `Shutdown`.

    `adapters` keeps this rank's base shards of the modules that have a LoRA adapter."""
    while True:
        message = group.broadcast_object()
        if isinstance(message, Step):
            run_step(runner, message)
        elif isinstance(message, sharded_weights.WeightUpdate):
            sharded_weights.receive_update(runner.model, message, group, adapters)
        elif isinstance(message, Shutdown):
            return
        else:
            raise TypeError(f"unknown step message {type(message).__name__}")


@torch.inference_mode()
def run_step(runner: ModelRunner, step: Step) -> torch.Tensor:
    copy_blocks(runner.kv_caches, step.blocks_to_copy)
    return runner.forward(_on_device(step.inputs, runner.device))


def _on_device(obj: object, device: torch.device) -> object:
    """The same dataclass with every tensor (nested dataclasses included) on `device`."""
    if device.type == HOST.type:
        return obj
    moved = {}
    for field in fields(obj):
        value = getattr(obj, field.name)
        if isinstance(value, torch.Tensor):
            moved[field.name] = value.to(device, non_blocking=True)
        elif hasattr(value, "__dataclass_fields__"):
            moved[field.name] = _on_device(value, device)
    return replace(obj, **moved)
