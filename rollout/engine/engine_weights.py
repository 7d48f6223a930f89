"""EngineWeights: which weight version serves, which adapters are merged on which base, how an update is written.

The engine holds one (as vLLM v1's core holds its executor) and stays the loop: it decides when an update may
run and what happens to the requests in flight (versions/in_flight.py); this object validates the tensors,
merges LoRA adapters into the held base (weights/adapter_store.py), writes them through the runner, or, with
`EngineConfig.self_check_updates`, writes them and self-checks the engine, rolling back on a mismatch
(`apply_checked`), then commits the version: the prefix cache is keyed by it, so no old block is reused.
"""

from __future__ import annotations

import torch

from rollout.config import EngineConfig
from rollout.engine.block_manager import BlockManager
from rollout.engine.kv.kv_cache import KVCacheSpec, LayerKV
from rollout.engine.model.model_guard import UnsupportedModelError
from rollout.engine.model.self_check import run_self_check
from rollout.engine.model_runner import ModelRunner
from rollout.engine.runner import Runner
from rollout.weights.adapter_store import AdapterPlan, AdapterStore
from rollout.weights.lora import LoraTargets
from rollout.weights.manifest import NamedTensors, WeightUpdateError
from rollout.weights.updater import check_next_version, plan_writes, write


class EngineWeights:
    def __init__(
        self,
        config: EngineConfig,
        local_runner: ModelRunner,
        runner: Runner,
        block_manager: BlockManager,
        max_model_len: int,
    ) -> None:
        self.config = config
        self.local_runner = local_runner  # the self-check's (single device only: TP refuses that option)
        self.runner = runner
        self.block_manager = block_manager
        self.max_model_len = max_model_len
        self.adapters = AdapterStore()  # LoRA adapters merged into their modules
        self.version = 0

    def update(
        self,
        named_tensors: NamedTensors,
        version: int | None = None,
        lora: LoraTargets | None = None,
        base_version: int | None = None,
    ) -> int:
        """Writes the tensors in place, atomically (all validated first), then commits; returns the version.

        An error means nothing changed: a bad version, tensor or base refuses before any write."""
        check_next_version(self.version, version)
        plan = self.plan(named_tensors, lora)
        self.adapters.check_base(plan, base_version)
        if self.config.self_check_updates:  # rolled back unless the engine still matches the model
            apply_checked(self.local_runner, plan.tensors, self.max_model_len)
        else:
            self.runner.write_weights(plan)
        version = self.commit(version, replaces_base=False)
        self.adapters.commit(plan, version)
        return version

    def plan(self, named_tensors: NamedTensors, lora: LoraTargets | None) -> AdapterPlan:
        """Validated, adapters merged (under tensor parallelism: into rank 0's shards)."""
        return self.adapters.plan(self.local_runner.model, named_tensors, lora)

    def resolve(
        self, named_tensors: NamedTensors, lora: LoraTargets | None = None
    ) -> dict[str, torch.Tensor]:
        """The tensors an update would write (adapters merged), without writing them (retry checks)."""
        return dict(self.plan(named_tensors, lora).tensors)

    def commit(self, version: int | None = None, replaces_base: bool = True) -> int:
        """A new version; after writing into the model directly, a new base too (weights/weight_base.py)."""
        if version is None:
            version = self.version + 1
        if version <= self.version:
            raise ValueError(f"version must increase: current {self.version}, got {version}")
        self.version = version
        self.block_manager.set_weight_version(version)
        if replaces_base:
            self.adapters.base_version = version
        return version


def apply_checked(runner: ModelRunner, named_tensors: NamedTensors, max_model_len: int | None) -> float:
    """Writes the tensors, self-checks the engine, restores the old values on a mismatch.

    New weights can break exactness where the old ones did not (all-zero attention sinks that were inert
    at load; weights that overflow the serving dtype). Returns the measured difference; raises
    WeightUpdateError (model unchanged: the replaced storages are restored from a copy) on failure.
    """
    writes = plan_writes(runner.model, named_tensors)
    backup = [(target, target.detach().clone()) for target, _ in writes]  # only what is replaced
    write(writes)
    try:
        return check_runner(runner, max_model_len)
    except UnsupportedModelError as exc:
        write(backup)
        raise WeightUpdateError(f"the update was rolled back: {exc}") from exc
    except BaseException:
        write(backup)
        raise


def check_runner(runner: ModelRunner, max_model_len: int | None = None) -> float:
    """The self-check for a live engine (after a weight update): its model, backend and cache shapes, on
    a scratch cache of its own (the serving KV cache is untouched)."""
    layers = tuple(LayerKV(k.shape[2], k.shape[3], v.shape[3]) for k, v in runner.kv_caches)
    spec = KVCacheSpec(layers, runner.kv_caches[0][0].dtype)
    return run_self_check(runner.model, spec, runner.backend, runner.block_size, max_model_len)
