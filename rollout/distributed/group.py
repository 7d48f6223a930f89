"""TPGroup: this process's place among the tensor-parallel ranks, and the groups they talk over.

Rank 0 (the driver) hosts the rendezvous store on a free loopback port and starts the workers.
The default process group carries the model's own collectives (gloo on CPU, NCCL on CUDA); step
messages and commit votes go over a small gloo group, as host objects, on every device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

DRIVER = 0
TIMEOUT = timedelta(minutes=30)  # a worker waits this long for its next step while the server idles


@dataclass(frozen=True)
class TPGroup:
    rank: int
    world_size: int
    device: torch.device
    cpu_group: dist.ProcessGroup  # gloo: step messages, votes

    @property
    def is_driver(self) -> bool:
        return self.rank == DRIVER

    def broadcast_object(self, obj: object = None) -> object:
        """The driver's `obj` on every rank (one pickled broadcast over the gloo group)."""
        holder = [obj if self.is_driver else None]
        dist.broadcast_object_list(holder, src=DRIVER, group=self.cpu_group)
        return holder[0]

    def all_gather_object(self, obj: object) -> list[object]:
        """Every rank's `obj`, in rank order, on every rank."""
        gathered: list[object] = [None] * self.world_size
        dist.all_gather_object(gathered, obj, group=self.cpu_group)
        return gathered

    def broadcast_tensor(self, tensor: torch.Tensor) -> None:
        """The driver's `tensor` into every rank's `tensor` (on the model's device, default group)."""
        dist.broadcast(tensor, src=DRIVER)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def host_store(world_size: int) -> dist.TCPStore:
    """The driver's rendezvous store on a free loopback port (read it from `.port`)."""
    return dist.TCPStore(
        "127.0.0.1", 0, world_size=world_size, is_master=True, timeout=TIMEOUT, wait_for_workers=False
    )


def join(rank: int, world_size: int, device: torch.device, store: dist.Store | None, port: int) -> TPGroup:
    """Initializes torch.distributed for this rank (the driver passes its store, workers its port)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
        os.environ["LOCAL_RANK"] = str(device.index)  # transformers binds each rank to its local device
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, world_size=world_size, is_master=False, timeout=TIMEOUT)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=TIMEOUT)
    cpu_group = dist.group.WORLD if backend == "gloo" else dist.new_group(backend="gloo", timeout=TIMEOUT)
    return TPGroup(rank, world_size, device, cpu_group)
