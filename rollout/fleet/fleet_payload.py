"""FleetPayload: what one fleet weight update carries to each replica, in memory or on disk.

In memory: the tensors as one object in Ray's store (`ref`). On disk: a safetensors directory
(`path`) every replica reads itself, identified by its files' names, sizes and mtimes
(`fingerprint`): replicas that read different files refuse the update, and a replica replaying the
ledger refuses a directory changed since. `lora` names the modules whose LoRA factors it carries
(merged into the held base `base_version` names, as a single server merges them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.weights.disk import checkpoint_files, load_checkpoint
from rollout.weights.lora import LoraTargets
from rollout.weights.manifest import WeightUpdateError


@dataclass(frozen=True)
class FleetPayload:
    ref: Any = None  # ray.ObjectRef of {name: tensor}, or None for a disk update
    path: str | None = None
    lora: LoraTargets | None = None
    base_version: int | None = None  # the base an adapter relying on the held one merges into
    fingerprint: str | None = None  # set once the replicas agreed on a disk update's files

    def with_fingerprint(self, fingerprint: str | None) -> FleetPayload:
        return FleetPayload(self.ref, self.path, self.lora, self.base_version, fingerprint)


def read_disk(payload: FleetPayload) -> tuple[dict[str, Any], str]:
    """(tensors, fingerprint) of a disk payload; refuses a directory other than the one agreed on."""
    directory = Path(str(payload.path))
    if not directory.exists():
        raise WeightUpdateError(f"path: {payload.path!r} does not exist on this replica")
    before = disk_fingerprint(directory)
    tensors = load_checkpoint(directory)
    if disk_fingerprint(directory) != before:
        raise WeightUpdateError(f"path: the checkpoint in {payload.path!r} changed while it was read")
    if payload.fingerprint is not None and before != payload.fingerprint:
        raise WeightUpdateError(
            f"path: the checkpoint in {payload.path!r} changed since the fleet committed it"
        )
    return tensors, before


def disk_fingerprint(directory: Path) -> str:
    digest = hashlib.sha256()
    for file in checkpoint_files(directory):
        stat = file.stat()
        digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()
