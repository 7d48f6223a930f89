"""Storages freed in place: every tensor viewing them stays the same object, with no bytes behind it.

`untyped_storage().resize_(0)` releases a storage's memory while the tensors, the parameters and the
lists holding them (the KV pools, the model) keep their identity; `resize_(nbytes)` gives them memory
again. This is how FSDP frees unsharded parameters. A copy kept on the host (level 1 on a GPU) is written
back byte for byte; without one (level 2, or a KV cache) the memory comes back filled with `fill`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass
class ReleasedStorage:
    storage: torch.UntypedStorage
    nbytes: int
    device: torch.device
    host_copy: torch.Tensor | None  # uint8 [nbytes] on the host, or None: the content is gone

    def restore(self, fill: int) -> None:
        """Memory back; the kept bytes written into it, else every byte set to `fill`."""
        self.storage.resize_(self.nbytes)
        data = _bytes_of(self.storage, self.device)
        if self.host_copy is not None:
            data.copy_(self.host_copy, non_blocking=False)
        else:
            data.fill_(fill)


def release(tensors: Iterable[torch.Tensor], keep_copy: bool) -> list[ReleasedStorage]:
    """Frees each distinct storage behind `tensors` (shared storages once: tied weights, K/V views).

    `keep_copy`: the bytes are first copied to the host (pinned when there is a GPU), for `restore`."""
    seen: set[int] = set()
    released = []
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.nbytes() == 0 or storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        device = tensor.device
        copy = _host_copy(storage, device) if keep_copy else None
        released.append(ReleasedStorage(storage, storage.nbytes(), device, copy))
    for item in released:
        item.storage.resize_(0)
    return released


def nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes held by the distinct storages behind `tensors`."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(size for ptr, size in storages.items() if ptr)


def _bytes_of(storage: torch.UntypedStorage, device: torch.device) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage)


def _host_copy(storage: torch.UntypedStorage, device: torch.device) -> torch.Tensor:
    data = _bytes_of(storage, device)
    if device.type == "cpu":
        return data.clone()
    host = torch.empty(data.shape, dtype=torch.uint8, pin_memory=torch.cuda.is_available())
    host.copy_(data)
    return host
