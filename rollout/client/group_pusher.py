"""The torch.distributed transport of a client's pushes: this process is rank 0, its servers the other ranks.

An ordinary server takes one rank; an address that is a fleet's front takes one per replica
(GetServerInfoResponse.weight_group_ranks), so ranks are given as consecutive ranges in address
order. Each update's ready/go handshake waits for every rank: an address has answered when all its
ranks have, and one refusal among them refuses for the address. A server that fails is named by
address in `WeightSyncError`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
import torch

from rollout.client.weight_sync_error import WeightSyncError, future_failures
from rollout.protocol.generated import rollout_pb2, rollout_pb2_grpc, weights_pb2
from rollout.protocol.weights_wire import DEFAULT_GROUP_TIMEOUT_S, backend_to_proto, manifest_to_proto
from rollout.weights.buckets import DEFAULT_BUCKET_BYTES, pack, plan_buckets
from rollout.weights.group import READY_OK, GroupSpec, WeightGroup, host_store
from rollout.weights.manifest import Manifest

Metadata = Sequence[tuple[str, str]]


class GroupPusher:
    """The broadcast group over the servers behind `channels` ({address: channel}); kept across pushes."""

    def __init__(
        self, channels: Mapping[str, grpc.Channel], stubs: Mapping[str, Any], metadata: Metadata
    ) -> None:
        self._channels, self._stubs, self._metadata = channels, stubs, tuple(metadata)
        self.group: WeightGroup | None = None
        self.ranks: dict[str, range] = {}  # address -> its ranks in the group

    @property
    def addresses(self) -> list[str]:
        return list(self._stubs)

    def init(
        self,
        master_addr: str = "127.0.0.1",
        master_port: int = 0,
        backend: str = "gloo",
        timeout_s: float = DEFAULT_GROUP_TIMEOUT_S,
        device: torch.device | None = None,
    ) -> None:
        """Creates the group: rank 0 here, hosting the store at master_addr (port 0: a free one); each
        server its ranks, in address order."""
        self.close()
        ranks = self._rank_ranges()
        world_size = 1 + sum(len(r) for r in ranks.values())
        store = host_store(master_addr, master_port, world_size, timeout_s)
        spec = GroupSpec(master_addr, store.port, world_size, 0, backend, timeout_s)
        futures = {address: self._init_future(address, spec, ranks[address]) for address in self.addresses}
        try:
            group = WeightGroup(spec, store, device)
        except Exception as err:
            raise WeightSyncError(future_failures(futures) or dict.fromkeys(futures, str(err))) from err
        failures = future_failures(futures, wait=True)
        if failures:
            group.close()
            raise WeightSyncError(failures)
        self.group, self.ranks = group, ranks

    def push(
        self,
        named: list[tuple[str, torch.Tensor]],
        options: Mapping[str, weights_pb2.CommitOptions],
        settle: Callable[[Mapping[str, Any]], int],
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        **group_kwargs: Any,
    ) -> int:
        """Broadcasts the tensors in packed buckets (setting the group up first if there is none);
        `settle` waits for the servers' responses and returns the version."""
        if self.group is None:
            self.init(**group_kwargs)
        group = self.group
        assert group is not None
        manifest = Manifest.of(named)
        update_id = uuid.uuid4().hex
        wire_manifest = manifest_to_proto(manifest)
        futures = {
            a: self._stubs[a].UpdateWeightsFromGroup.future(
                weights_pb2.UpdateWeightsFromGroupRequest(
                    manifest=wire_manifest, options=options[a], update_id=update_id, bucket_bytes=bucket_bytes
                ),
                metadata=self._metadata,
            )
            for a in self._stubs
        }
        refusals, lost = self._await_ready(group, update_id, futures)
        group.announce(update_id, go=not (refusals or lost))
        if lost:
            self.close()  # a server left the group (restarted, died): the next push sets up a new one
        if refusals or lost:
            raise WeightSyncError({**refusals, **lost})
        try:
            tensors = [tensor for _, tensor in named]
            for bucket in plan_buckets(manifest, bucket_bytes):
                group.broadcast(pack(bucket, tensors, group.device))
        except Exception as err:
            self.close()  # a collective that failed midway leaves the group unusable
            raise WeightSyncError(future_failures(futures) or dict.fromkeys(futures, str(err))) from err
        return settle(futures)

    def close(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            group.close()

    def _rank_ranges(self) -> dict[str, range]:
        """Each address's ranks: GetServerInfo's weight_group_ranks (0: one), consecutive from 1."""
        counts, failures = {}, {}
        for address, channel in self._channels.items():
            try:
                info = rollout_pb2_grpc.RolloutServiceStub(channel).GetServerInfo(
                    rollout_pb2.GetServerInfoRequest(), metadata=self._metadata, timeout=60
                )
                counts[address] = max(info.weight_group_ranks, 1)
            except grpc.RpcError as err:
                failures[address] = f"GetServerInfo: {err.code().name}: {err.details()}"
        if failures:
            raise WeightSyncError(failures)
        ranks, first = {}, 1
        for address in self.addresses:
            ranks[address] = range(first, first + counts[address])
            first += counts[address]
        return ranks

    def _init_future(self, address: str, spec: GroupSpec, ranks: range) -> grpc.Future:
        request = weights_pb2.InitWeightGroupRequest(
            master_addr=spec.master_addr,
            master_port=spec.master_port,
            world_size=spec.world_size,
            rank=ranks.start,
            backend=backend_to_proto(spec.backend),
            timeout_s=spec.timeout_s,
            num_ranks=len(ranks) if len(ranks) > 1 else 0,
        )
        return self._stubs[address].InitWeightGroup.future(request, metadata=self._metadata)

    def _await_ready(
        self, group: WeightGroup, update_id: str, futures: dict[str, grpc.Future]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Waits until every address has answered the handshake on all its ranks or failed its RPC.

        Returns ({address: refusal} from addresses with a rank that answered no, {address: error} from
        servers that failed or stayed silent past the deadline).
        """
        owner = {rank: address for address, ranks in self.ranks.items() for rank in ranks}
        deadline = time.monotonic() + group.spec.timeout_s
        while True:
            by_address: dict[str, list[str]] = {}
            for rank, answer in group.answers(update_id).items():
                by_address.setdefault(owner[rank], []).append(answer)
            answered = {a: whys for a, whys in by_address.items() if len(whys) == len(self.ranks[a])}
            lost = future_failures({a: f for a, f in futures.items() if a not in answered and f.done()})
            refusals = {
                a: "; ".join(w for w in whys if w != READY_OK)
                for a, whys in by_address.items()
                if any(w != READY_OK for w in whys) and a not in lost
            }
            if len(answered) + len(lost) == len(self.ranks):
                return refusals, lost
            if time.monotonic() > deadline:
                silent = [a for a in self.addresses if a not in answered and a not in lost]
                timeout = f"no answer within {group.spec.timeout_s}s"
                return refusals, {**lost, **dict.fromkeys(silent, timeout)}
            time.sleep(0.002)
