"""Weight updates under tensor parallelism: the update in, each rank's shards written, on every rank or none.

Every transport delivers the update to rank 0 as the trainer has it: full tensors, and LoRA factors
with their scalings. Rank 0's engine validates it and merges each adapter into rank 0's kept base
shards (rollout/weights/adapter_store.py), so a bad update is refused before any rank hears of it.
Rank 0 then broadcasts the update as sent (manifest, then each tensor); every other rank validates
it against its own model, keeps only its slice of each full tensor (cut with the placements the
tensor-parallel plan gave that parameter, `distribute_tensor` on local data) and merges each adapter
into its own base shards the same way: the full delta, computed as one device computes it, then
sliced, so each rank serves exactly its slice of what one device serves. A vote over the gloo group
decides: only when every rank staged everything do all ranks write (and keep their new bases);
otherwise every rank keeps the weights and adapters it had and rank 0 raises, naming the ranks that
failed and why.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor
from transformers import PreTrainedModel

from rollout.distributed.group import TPGroup
from rollout.weights.adapter_store import AdapterPlan, AdapterStore
from rollout.weights.lora import LoraTarget, validate_update
from rollout.weights.manifest import (
    Manifest,
    TensorSpec,
    WeightUpdateError,
    model_targets,
    normalize_name,
    torch_dtype,
)
from rollout.weights.shards import local_shard, local_tensor, sharded_like
from rollout.weights.updater import unique_writes, write

Write = tuple[torch.Tensor, torch.Tensor]  # (this rank's storage, this rank's new value)
_REFUSED = "weight update refused, nothing written: "


@dataclass(frozen=True)
class WeightUpdate:
    """The step message announcing an update: its tensors follow, one broadcast each, in this order."""

    manifest: Manifest
    lora: dict[str, LoraTarget] | None = None  # the modules whose LoRA factors the update carries


def update_all_ranks(model: PreTrainedModel, plan: AdapterPlan, group: TPGroup) -> None:
    """Driver side: sends the update to every rank and writes it on all of them, or raises having written none.

    `plan` is rank 0's (validated, its own shards merged: `AdapterStore.plan`)."""
    manifest = Manifest(tuple(TensorSpec.of(name, tensor) for name, tensor in plan.sent))
    group.broadcast_object(WeightUpdate(manifest, dict(plan.lora) if plan.lora else None))
    for spec, (_, tensor) in zip(manifest.tensors, plan.sent, strict=True):
        _received(spec, tensor, group)
    writes: list[Write] = []
    error: str | None = None
    try:
        writes = _local_writes(model, plan.tensors)
    except Exception as exc:  # any failure on any rank must veto the commit on all of them
        error = _reason(exc)
    _vote(error, group)
    write(writes)


def receive_update(model: PreTrainedModel, update: WeightUpdate, group: TPGroup, store: AdapterStore) -> None:
    """Worker side: the same exchange, with the update arriving from rank 0 and merged into this rank's `store`."""
    with contextlib.suppress(WeightUpdateError):  # every rank kept its weights; rank 0 reports why
        items, error = _receive(model, update, group)
        plan: AdapterPlan | None = None
        writes: list[Write] = []
        if error is None:
            try:
                plan = store.plan(model, items, update.lora)
                writes = _local_writes(model, plan.tensors)
            except Exception as exc:  # any failure on any rank must veto the commit on all of them
                error = _reason(exc)
        _vote(error, group)
        write(writes)
        store.commit(plan)


def _receive(
    model: PreTrainedModel, update: WeightUpdate, group: TPGroup
) -> tuple[list[tuple[str, torch.Tensor]], str | None]:
    """The update's tensors from rank 0: LoRA factors whole, every other tensor cut to this rank's
    slice as it arrives; and why this rank cannot take it, if it cannot."""
    targets = model_targets(model)
    error: str | None = None
    factors: dict[str, tuple[str, str]] = {}
    try:
        factors = validate_update(update.manifest, targets, update.lora)
    except WeightUpdateError as exc:
        error = str(exc).removeprefix(_REFUSED)
    items = []
    for spec in update.manifest.tensors:
        full = _received(spec, None, group)
        if error is None:
            try:
                cut = full if spec.name in factors else _cut(targets[normalize_name(spec.name)], full)
                items.append((spec.name, cut))
            except Exception as exc:  # any failure on any rank must veto the commit on all of them
                error = f"{spec.name}: {type(exc).__name__}: {exc}"
    return items, error


def _local_writes(model: PreTrainedModel, tensors: list[tuple[str, torch.Tensor]]) -> list[Write]:
    """(this rank's storage, its new value) per storage, from full tensors or this rank's shards."""
    targets = model_targets(model)
    writes = []
    for name, value in tensors:
        target = targets[normalize_name(name)]
        writes.append((local_tensor(target), local_shard(target, _cut(target, value))))
    return unique_writes(writes)


def _cut(target: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """This rank's slice of `full` as a tensor of its own (a view would keep all of `full` alive)."""
    if isinstance(full, DTensor) or not isinstance(target, DTensor):
        return full
    return sharded_like(target, local_shard(target, full).clone())


def _vote(error: str | None, group: TPGroup) -> None:
    """Every rank's outcome on every rank: all raise unless every rank staged everything."""
    failures = {rank: e for rank, e in enumerate(group.all_gather_object(error)) if e is not None}
    if failures:
        reasons = "; ".join(f"rank {rank}: {reason}" for rank, reason in failures.items())
        raise WeightUpdateError(f"weight update refused, nothing written on any rank: {reasons}")


def _reason(exc: Exception) -> str:
    if isinstance(exc, WeightUpdateError):
        return str(exc).removeprefix(_REFUSED)
    notes = "".join(f" ({note})" for note in getattr(exc, "__notes__", ()))
    return f"{type(exc).__name__}: {exc}{notes}"


def _received(spec: TensorSpec, tensor: torch.Tensor | None, group: TPGroup) -> torch.Tensor:
    """The full tensor on this rank's device: the driver's own, or a buffer the broadcast fills."""
    if tensor is not None:
        buffer = tensor.to(group.device).contiguous()
    else:
        buffer = torch.empty(spec.shape, dtype=torch_dtype(spec.dtype), device=group.device)
    group.broadcast_tensor(buffer)
    return buffer
