"""A weight-broadcast group of its own: trainer rank 0, every server rank 1..N.

The group is built straight from a `TCPStore` and a backend process group (gloo on CPU, NCCL on
GPU) instead of `init_process_group`, so it never touches the default group a trainer already has
(FSDP, DeepSpeed...). It is created once and reused for every update. Each update starts with a
handshake through the store (every server says ready or why not; the trainer says go or abort) so a
server that refuses an update never leaves the others blocked in a collective, and every wait has a
deadline so a dead peer is an error, not a hang.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl")
READY_OK = "ok"


@dataclass(frozen=True)
class GroupSpec:
    """Where the trainer's store listens and this member's place in the group."""

    master_addr: str
    master_port: int
    world_size: int
    rank: int
    backend: str = "gloo"
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.world_size < 2:
            raise ValueError(
                f"world_size must be >= 2 (the trainer and at least one server), got {self.world_size}"
            )
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {self.rank}")
        if not 0 < self.master_port < 65536:
            raise ValueError(f"master_port must be in [1, 65535], got {self.master_port}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout_s)


class WeightGroup:
    """One member of the broadcast group. Rank 0 (the trainer) hosts the store (`host_store`);
    servers `join`. Construction blocks until every member has joined, or the deadline passes."""

    def __init__(self, spec: GroupSpec, store: dist.Store, device: torch.device | None = None) -> None:
        self.spec = spec
        self.device = device or torch.device("cuda" if spec.backend == "nccl" else "cpu")
        self.store = dist.PrefixStore("rollout/weights", store)
        self.process_group = _make_process_group(self.store, spec, self.device)

    @classmethod
    def join(cls, spec: GroupSpec, device: torch.device | None = None) -> WeightGroup:
        """Server side: connects to the trainer's store and joins the group."""
        store = dist.TCPStore(spec.master_addr, spec.master_port, is_master=False, timeout=spec.timeout)
        return cls(spec, store, device)

    @property
    def rank(self) -> int:
        return self.spec.rank

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Broadcasts `tensor` from the trainer into every member's `tensor`, within the deadline."""
        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.timeout = self.spec.timeout
        work = self.process_group.broadcast([tensor], options)
        if not work.wait(self.spec.timeout):
            raise TimeoutError(f"weight broadcast timed out after {self.spec.timeout_s}s")

    def report_ready(self, update_id: str, error: str | None) -> None:
        """Server side: tells the trainer whether this server will take update `update_id`."""
        self.store.set(f"{update_id}/ready/{self.rank}", error or READY_OK)

    def wait_go(self, update_id: str) -> bool:
        """Server side: waits for the trainer's decision on `update_id`; True means the tensors follow."""
        key = f"{update_id}/go"
        self.store.wait([key], self.spec.timeout)
        return self.store.get(key).decode() == "go"

    def answers(self, update_id: str) -> dict[int, str]:
        """Trainer side, non-blocking: {rank: "ok" or the refusal} for the servers that answered so far."""
        keys = {rank: f"{update_id}/ready/{rank}" for rank in range(1, self.spec.world_size)}
        present = {rank: key for rank, key in keys.items() if self.store.check([key])}
        return {rank: self.store.get(key).decode() for rank, key in present.items()}

    def announce(self, update_id: str, go: bool) -> None:
        """Trainer side: releases the servers waiting on `update_id`, into the broadcast or out of it."""
        self.store.set(f"{update_id}/go", "go" if go else "abort")

    def close(self) -> None:
        """Leaves the group; the store closes with the last reference to it."""
        self.process_group.shutdown()


def host_store(master_addr: str, master_port: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    """Trainer side: the group's rendezvous store; port 0 picks a free port (read it from `.port`)."""
    timeout = timedelta(seconds=timeout_s)
    return dist.TCPStore(
        master_addr,
        master_port,
        world_size=world_size,
        is_master=True,
        timeout=timeout,
        wait_for_workers=False,
    )


def _make_process_group(store: dist.Store, spec: GroupSpec, device: torch.device) -> dist.ProcessGroup:
    if spec.backend == "gloo":
        return dist.ProcessGroupGloo(store, spec.rank, spec.world_size, spec.timeout)
    torch.cuda.set_device(device)  # NCCL binds the communicator to the current device
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = spec.timeout
    return dist.ProcessGroupNCCL(store, spec.rank, spec.world_size, options)
