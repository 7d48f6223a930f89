"""Weight updates under tensor parallelism: full tensors in, each rank's shard written, on every rank or none.

Every transport delivers full tensors to rank 0, as the trainer has them. Rank 0 validates the
manifest (a bad one refuses before any rank hears of it), broadcasts the manifest and then each
tensor; every rank validates it against its own model and keeps only its slice, cut with the
placements the tensor-parallel plan gave that parameter (`distribute_tensor` on local data). A vote
over the gloo group decides: only when every rank staged everything do all ranks write; otherwise
every rank keeps the weights it had and rank 0 raises, naming the ranks that failed and why.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from rollout.distributed.group import TPGroup
from rollout.weights.manifest import (
    Manifest,
    NamedTensors,
    TensorSpec,
    WeightUpdateError,
    iter_named_tensors,
    model_targets,
    torch_dtype,
    validate_manifest,
)
from rollout.weights.shards import local_shard, local_tensor
from rollout.weights.updater import unique_writes, write

Write = tuple[torch.Tensor, torch.Tensor]  # (this rank's storage, this rank's new value)


@dataclass(frozen=True)
class WeightUpdate:
    """The step message announcing an update: its tensors follow, one broadcast each, in this order."""

    manifest: Manifest


def update_all_ranks(model: PreTrainedModel, named_tensors: NamedTensors, group: TPGroup) -> None:
    """Driver side: sends the update to every rank and writes it on all of them, or raises having written none."""
    items = list(iter_named_tensors(named_tensors))
    manifest = Manifest(tuple(TensorSpec.of(name, tensor) for name, tensor in items))
    validate_manifest(manifest, model_targets(model))
    group.broadcast_object(WeightUpdate(manifest))
    _stage_and_commit(model, manifest, group, [tensor for _, tensor in items])


def receive_update(model: PreTrainedModel, update: WeightUpdate, group: TPGroup) -> None:
    """Worker side: the same exchange, with the tensors arriving from rank 0."""
    with contextlib.suppress(WeightUpdateError):  # every rank kept its weights; rank 0 reports why
        _stage_and_commit(model, update.manifest, group, None)


def _stage_and_commit(
    model: PreTrainedModel, manifest: Manifest, group: TPGroup, tensors: list[torch.Tensor] | None
) -> None:
    staged: list[Write] = []
    error: str | None = None
    targets = model_targets(model)
    try:
        resolved = validate_manifest(manifest, targets)
    except WeightUpdateError as exc:
        error = str(exc)
    for i, spec in enumerate(manifest.tensors):
        full = _received(spec, tensors[i] if tensors is not None else None, group)
        if error is None:
            try:
                target = targets[resolved[spec.name]]
                staged.append((local_tensor(target), local_shard(target, full).clone()))
            except Exception as exc:  # any failure on any rank must veto the commit on all of them
                error = f"{spec.name}: {type(exc).__name__}: {exc}"
    failures = {rank: e for rank, e in enumerate(group.all_gather_object(error)) if e is not None}
    if failures:
        reasons = "; ".join(f"rank {rank}: {reason}" for rank, reason in failures.items())
        raise WeightUpdateError(f"weight update refused, nothing written on any rank: {reasons}")
    write(unique_writes(staged))


def _received(spec: TensorSpec, tensor: torch.Tensor | None, group: TPGroup) -> torch.Tensor:
    """The full tensor on this rank's device: the driver's own, or a buffer the broadcast fills."""
    if tensor is not None:
        buffer = tensor.to(group.device).contiguous()
    else:
        buffer = torch.empty(spec.shape, dtype=torch_dtype(spec.dtype), device=group.device)
    group.broadcast_tensor(buffer)
    return buffer
