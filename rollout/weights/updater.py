"""Applies named tensors to a model: validate everything, then copy in place.

Writes go through `param.data.copy_()`, so every parameter keeps its storage: CUDA graphs and
anything else captured against the parameters stay valid, and tied embeddings (one storage under
two names) stay tied and are written once. `StagedWeights` holds a streamed update until all of it
has arrived, so an interrupted transfer never touches the model.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn

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


def check_next_version(current: int, version: int | None) -> int:
    """The version a commit will set: `version` if given (it must increase), else current + 1."""
    if version is None:
        return current + 1
    if isinstance(version, bool) or not isinstance(version, int) or version <= current:
        raise WeightUpdateError(
            f"version must be an integer > the current version {current}, got {version!r}"
        )
    return version


def apply_named_tensors(model: nn.Module, named_tensors: NamedTensors, allow_partial: bool = True) -> int:
    """Validates all tensors against `model`, then copies each into its parameter or buffer in place.

    Nothing is written unless every tensor passes. Returns the number of storages written.
    """
    writes = plan_writes(model, named_tensors, allow_partial)
    write(writes)
    return len(writes)


def plan_writes(
    model: nn.Module, named_tensors: NamedTensors, allow_partial: bool = True
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(target storage, new value) per storage to write, all validated; raises before any write."""
    items = list(iter_named_tensors(named_tensors))
    targets = model_targets(model)
    resolved = validate_manifest(
        Manifest(tuple(TensorSpec.of(n, t) for n, t in items)), targets, allow_partial
    )
    return unique_writes([(targets[resolved[name]], tensor) for name, tensor in items])


def write(writes: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Copies every value into its target in place and waits until the copies have landed."""
    with torch.no_grad():
        for target, tensor in writes:
            target.data.copy_(tensor, non_blocking=True)
    _synchronize(writes)


def unique_writes(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One write per storage: the first tensor sent for a tied parameter wins."""
    seen: set[int] = set()
    unique = []
    for target, tensor in pairs:
        key = target.data_ptr()
        if key not in seen:
            seen.add(key)
            unique.append((target, tensor))
    return unique


def _synchronize(writes: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    # non_blocking host-to-device copies from pinned memory must land before the update is reported done.
    devices = {target.device for target, _ in writes if target.device.type == "cuda"}
    for device in devices:
        torch.cuda.synchronize(device)


class StagedWeights:
    """Receive buffers for a validated manifest; the model is touched only by `apply_named_tensors` later.

    Buffers live on `device` (CPU by default; pinned when CUDA is available so the commit's copies
    are asynchronous). Transports write raw bytes (`write_bytes`) or whole tensors (`write_tensor`).
    """

    def __init__(self, manifest: Manifest, device: torch.device | str = "cpu") -> None:
        self.manifest = manifest
        device = torch.device(device)
        pin = device.type == "cpu" and torch.cuda.is_available()
        self.tensors: dict[str, torch.Tensor] = {
            spec.name: torch.empty(spec.shape, dtype=torch_dtype(spec.dtype), device=device, pin_memory=pin)
            for spec in manifest.tensors
        }
        self._starts = _byte_starts(manifest)
        self._flat: list[np.ndarray] = []
        if device.type == "cpu":
            self._flat = [t.view(-1).view(torch.uint8).numpy() for t in self.tensors.values()]
        self.num_bytes_received = 0

    @property
    def complete(self) -> bool:
        return self.num_bytes_received == self.manifest.nbytes

    def write_bytes(self, offset: int, data: bytes | memoryview) -> None:
        """Writes `data` at `offset` of the concatenation of all tensors' bytes, in manifest order."""
        if offset != self.num_bytes_received:
            raise WeightUpdateError(f"chunk at byte {offset}, expected byte {self.num_bytes_received}")
        if offset + len(data) > self.manifest.nbytes:
            raise WeightUpdateError(
                f"{offset + len(data)} bytes sent, the manifest declares {self.manifest.nbytes}"
            )
        # numpy reads the immutable protobuf bytes without a copy; the staging buffers are CPU tensors.
        source = np.frombuffer(data, dtype=np.uint8)
        for index, start, piece in self._pieces(offset, len(data)):
            flat = self._flat[index]
            flat[piece] = source[start : start + (piece.stop - piece.start)]
        self.num_bytes_received += len(data)

    def _pieces(self, offset: int, length: int) -> Iterator[tuple[int, int, slice]]:
        """(tensor index, start in data, byte slice in that tensor) for each tensor the range covers."""
        end = offset + length
        index = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        while index < len(self._starts) and self._starts[index] < end:
            begin = self._starts[index]
            stop = begin + self.manifest.tensors[index].nbytes
            if stop > offset:
                lo, hi = max(begin, offset), min(stop, end)
                yield index, lo - offset, slice(lo - begin, hi - begin)
            index += 1

    def write_tensor(self, name: str, data: torch.Tensor) -> None:
        """Copies one whole tensor (any shape with the right number of elements) into its buffer."""
        self.tensors[name].view(-1).copy_(data.view(-1))
        self.num_bytes_received += self.tensors[name].nbytes

    def named_tensors(self) -> dict[str, torch.Tensor]:
        if not self.complete:
            raise WeightUpdateError(
                f"update incomplete: {self.num_bytes_received} of {self.manifest.nbytes} bytes received"
            )
        return self.tensors


def _byte_starts(manifest: Manifest) -> list[int]:
    starts, position = [], 0
    for spec in manifest.tensors:
        starts.append(position)
        position += spec.nbytes
    return starts
