"""UpdateLedger: recognises the retry of a weight update that already landed, so it is never applied twice.

A client can be told an update failed (deadline, dropped connection) although the server committed
it a moment later. Its retry must then succeed with the version that update set, not bump the
version again nor be refused. Two keys recognise a retry: the `update_id` the client sends, and,
for a retry that asks for the current version explicitly, the content (the tensors equal the
weights serving, bit for bit, so applying them again would change nothing).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

import torch
from torch import nn

from rollout.weights.manifest import Manifest, model_targets, validate_manifest
from rollout.weights.shards import local_shard, local_tensor

DEFAULT_REMEMBERED_UPDATES = 64


class UpdateLedger:
    """The ids of the last committed updates and the version each one set; thread-safe."""

    def __init__(self, capacity: int = DEFAULT_REMEMBERED_UPDATES) -> None:
        self._versions: OrderedDict[str, int] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()
        self.last_committed: int | None = None  # the version the last update set (None: none yet)

    def version_of(self, update_id: str) -> int | None:
        """The version update `update_id` set, if it was committed here (empty id: None)."""
        if not update_id:
            return None
        with self._lock:
            return self._versions.get(update_id)

    def record(self, update_id: str, version: int) -> None:
        with self._lock:
            self.last_committed = version
            if update_id:
                self._versions[update_id] = version
                self._versions.move_to_end(update_id)
                while len(self._versions) > self._capacity:
                    self._versions.popitem(last=False)

    def is_retry_of_current(self, requested: int | None, current: int) -> bool:
        """True when `requested` names the version the last update here set and still serving."""
        return requested is not None and requested == current == self.last_committed


def equals_model(model: nn.Module, named_tensors: Mapping[str, torch.Tensor]) -> bool:
    """True when every tensor equals (bit for bit) the model's tensor it would be written to."""
    targets = model_targets(model)
    resolved = validate_manifest(Manifest.of(named_tensors), targets)
    return all(_equal(targets[resolved[name]], tensor) for name, tensor in named_tensors.items())


def _equal(target: torch.Tensor, tensor: torch.Tensor) -> bool:
    """Under tensor parallelism, this rank's shard against the same cut of the full tensor."""
    local = local_tensor(target)
    return torch.equal(local, local_shard(target, tensor.to(local.device)))
