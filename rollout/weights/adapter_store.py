"""AdapterStore: the server's LoRA state, a copy of each adapted module's base weight (or parameter).

An adapted module serves `base + scaling * B @ A` merged into its own parameter (same storage), so
the engine runs the plain model: same kernels, CUDA graphs, self-check. The store keeps that
module's base weight so the next adapter is merged into the base, never into the previous merge
(subtracting the old delta would drift by a rounding each push). A copy exists only while its module
has an adapter; pushing a module's weight without an adapter ends its adapter (docs/weight_updates.md).
The store also knows which base that is (`base_version`): an update whose adapters merge into it must
name it, and any other update replaces it (weight_base.py).
Under tensor parallelism every rank keeps its own store over its own shards: it merges the full
delta's slice into its base shard, so each rank holds the slice of what one device would serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from rollout.weights.lora import LoraTargets, adapter_delta, merged_weight, target_weight, validate_update
from rollout.weights.manifest import (
    Manifest,
    NamedTensors,
    TensorSpec,
    WeightUpdateError,
    iter_named_tensors,
    model_targets,
    normalize_name,
)
from rollout.weights.shards import local_shard, local_tensor, sharded_like
from rollout.weights.weight_base import WeightBase, check_base, relies_on_held_base


@dataclass(frozen=True, slots=True)
class AdapterPlan:
    """An update with its adapters merged: ordinary named tensors to write, and the store's next state.

    Under tensor parallelism a merged weight is this rank's shard (`sharded_like`), and `sent` and
    `lora` are the update as it came, from which every other rank merges its own shards."""

    tensors: list[tuple[str, torch.Tensor]]
    bases: dict[str, torch.Tensor] = field(default_factory=dict)  # weight -> base (shard) kept after commit
    dropped: tuple[str, ...] = ()  # weights whose adapter this update ends
    sent: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    lora: LoraTargets | None = None
    relies_on_base: bool = False  # some adapter merges into the held base (not one pushed with it)


class AdapterStore:
    """The base weights of the modules that have an adapter; changed only by `commit`."""

    def __init__(self) -> None:
        self._bases: dict[str, torch.Tensor] = {}
        self.base_version = 0  # the version that set the base adapters merge into (0: the weights loaded)

    @property
    def adapted(self) -> list[str]:
        """The weights serving base + adapter now."""
        return sorted(self._bases)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self._bases.values())

    def plan(self, model: nn.Module, named_tensors: NamedTensors, lora: LoraTargets | None) -> AdapterPlan:
        """Validates the update (adapters included) and merges each adapter into its base.

        Writes nothing and leaves the store unchanged: WeightUpdateError naming every bad module.
        """
        items = list(iter_named_tensors(named_tensors))
        targets = model_targets(model)
        factors = validate_update(Manifest(tuple(TensorSpec.of(n, t) for n, t in items)), targets, lora)
        relies = relies_on_held_base((name for name, _ in items), lora)
        if not factors and not self._bases:
            return AdapterPlan(items, sent=items, lora=lora, relies_on_base=relies)
        base_items = [(name, t) for name, t in items if name not in factors]
        pushed = {normalize_name(name): t for name, t in base_items}
        pairs = _pairs(items, factors)
        merged_names = {target_weight(module, lora[module]) for module in pairs}
        tensors = [(name, t) for name, t in base_items if normalize_name(name) not in merged_names]
        bases = {}
        for module, (a, b) in pairs.items():
            weight = target_weight(module, lora[module])
            param = targets[weight]
            try:
                base = self._base_of(weight, param, pushed.get(weight))
                full = adapter_delta(a, b, lora[module], param, base.device)
                delta = local_shard(param, full)  # the full delta as one device computes it, then cut
                merged = merged_weight(base, delta)
            except Exception as exc:  # named in a rank's vote (rollout/distributed/sharded_weights.py)
                exc.add_note(f"while merging the LoRA adapter of {module}")
                raise
            _check_finite(module, merged)
            tensors.append((weight, sharded_like(param, merged)))
            bases[weight] = base
        dropped = tuple(w for w in self._bases if w in pushed and w not in bases)
        return AdapterPlan(tensors, bases, dropped, items, lora, relies)

    def check_base(self, plan: AdapterPlan, base_version: int | None) -> None:
        """Refuses a plan naming another base than the one held, or relying on it without naming it."""
        named = None if base_version is None else WeightBase("", base_version)
        check_base(named, WeightBase("", self.base_version), plan.relies_on_base)

    def commit(self, plan: AdapterPlan, version: int | None = None) -> None:
        """Records what a written plan left serving. `version`: the version it committed (rank 0, which
        keeps `base_version`), the new base unless the plan's adapters merged into the held one."""
        for weight in plan.dropped:
            del self._bases[weight]
        self._bases.update(plan.bases)
        if version is not None and not plan.relies_on_base:
            self.base_version = version

    def _base_of(self, weight: str, param: torch.Tensor, pushed: torch.Tensor | None) -> torch.Tensor:
        """This rank's base that the module's adapter merges into: pushed with it, kept, or (first
        adapter) the weight serving now, which is the base since the module has no adapter."""
        local = local_tensor(param)
        if pushed is not None:
            return local_shard(param, pushed).to(device=local.device, dtype=local.dtype, copy=True)
        kept = self._bases.get(weight)
        return kept if kept is not None else local.clone()


def _pairs(
    items: list[tuple[str, torch.Tensor]], factors: dict[str, tuple[str, str]]
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    found: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in items:
        if name in factors:
            module, factor = factors[name]
            found.setdefault(module, {})[factor] = tensor
    return {module: (pair["A"], pair["B"]) for module, pair in found.items()}


def _check_finite(module: str, merged: torch.Tensor) -> None:
    if not torch.isfinite(merged).all():
        raise WeightUpdateError(
            f"weight update refused, nothing written: {module}: the merged weight has NaN or inf "
            "(the adapter is broken)"
        )
