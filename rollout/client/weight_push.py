"""Trainer side of weight updates: push a model's weights to every server of a client.

`WeightPusher` holds what lives across updates (the torch.distributed group, the base each server
holds: base_pins.py) and talks to each server over its own channel, all servers at once;
`push_weights` is the entry point the client's `update_weights` uses. A server that fails is named
by address in `WeightSyncError`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import torch
from torch import nn

from rollout.client.base_pins import BasePins
from rollout.client.boot_ids import BootIds
from rollout.client.group_pusher import GroupPusher
from rollout.client.weight_sync_error import WeightSyncError, describe, future_failures
from rollout.protocol.generated import weights_pb2, weights_pb2_grpc
from rollout.protocol.shared_wire import this_host, views_to_proto
from rollout.protocol.weights_wire import (
    DEFAULT_GROUP_TIMEOUT_S,
    base_to_proto,
    commit_options,
    manifest_to_proto,
)
from rollout.weights.buckets import DEFAULT_BUCKET_BYTES
from rollout.weights.disk import save_checkpoint
from rollout.weights.lora import LoraTargets
from rollout.weights.lora_export import update_source
from rollout.weights.manifest import Manifest, NamedTensors, unique_named_tensors
from rollout.weights.shared import share_tensors
from rollout.weights.streaming import DEFAULT_CHUNK_BYTES, iter_byte_chunks
from rollout.weights.weight_base import relies_on_held_base

TRANSPORTS = ("grpc", "distributed", "disk", "shared")
Metadata = Sequence[tuple[str, str]]
__all__ = ["TRANSPORTS", "WeightPusher", "WeightSyncError", "push_weights", "pusher_for", "stream_requests"]


class WeightPusher:
    """Pushes weights to the servers behind `channels` ({address: channel}); one per client.

    `bases` pins the base each server holds after this pusher's updates, and an adapter push names
    it (base_pins.py); `boot_ids`: the client's, whose first process per address is the one whose
    loaded weights an adapter push names before any base push.
    """

    def __init__(
        self,
        channels: Mapping[str, grpc.Channel],
        metadata: Metadata | None = None,
        boot_ids: BootIds | None = None,
    ) -> None:
        if not channels:
            raise ValueError("channels: at least one server is needed")
        self._stubs = {
            address: weights_pb2_grpc.WeightSyncServiceStub(ch) for address, ch in channels.items()
        }
        self._metadata = tuple(metadata or ())
        self._group = GroupPusher(channels, self._stubs, self._metadata)
        self.bases = BasePins(channels, self._metadata, boot_ids)

    @property
    def addresses(self) -> list[str]:
        return list(self._stubs)

    def push(
        self,
        model_or_named_tensors: nn.Module | NamedTensors | None,
        transport: str = "grpc",
        version: int | None = None,
        abort_running: bool = False,
        in_flight: str = "wait",
        update_id: str | None = None,
        lora: LoraTargets | str | None = None,
        **kwargs: Any,
    ) -> int:
        """Updates every server; returns the version now serving (the highest, if they differ).

        A PEFT model sends only its adapter (`lora="adapter"`, the default for one: LoRA factors,
        their scalings, other trainable tensors) or its base weights with the adapter (`lora="full"`,
        for a server that does not hold this base yet); tensors with LoRA factors take
        `lora={module: LoraTarget}` (rollout/weights/lora_export.py, rollout/weights/lora.py).

        An adapter push names, per server, the base pinned for it (`bases`); a server holding another
        (restarted, or a full update from elsewhere since) refuses it, FAILED_PRECONDITION.

        `in_flight` ("wait" | "abort" | "keep" | "recompute") is what each server does to the
        requests generating when it commits (rollout/engine/versions/in_flight.py). `update_id` names the
        update for retries (default: a fresh id); a server that already committed that id answers
        with the version it set then. A `WeightSyncError` carries it.
        """
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        named, lora = (None, lora) if model_or_named_tensors is None else _named(model_or_named_tensors, lora)
        if named is None and transport != "disk":
            raise ValueError(f"model_or_named_tensors: required for the {transport} transport")
        common = commit_options(version, abort_running, in_flight, update_id or uuid.uuid4().hex, lora)
        relies = bool(lora) and (named is None or relies_on_held_base((n for n, _ in named), lora))
        try:
            options = self._options_per_server(common, relies)
            if transport == "grpc":
                return self.push_grpc(named, options, **kwargs)
            if transport == "distributed":
                return self.push_distributed(named, options, **kwargs)
            if transport == "shared":
                return self.push_shared(named, options, **kwargs)
            return self.push_disk(named, options, **kwargs)
        except WeightSyncError as err:
            err.update_id = common.update_id
            raise

    # ---- grpc -----------------------------------------------------------------------------------

    def _options_per_server(
        self, common: weights_pb2.CommitOptions, relies: bool
    ) -> dict[str, weights_pb2.CommitOptions]:
        """`common`, naming each server's pinned base when the update relies on the base held."""
        options, failures = {}, {}
        for address in self.addresses:
            options[address] = one = weights_pb2.CommitOptions()
            one.CopyFrom(common)
            try:
                if relies:
                    one.base.CopyFrom(base_to_proto(self.bases.named(address)))
            except grpc.RpcError as err:
                failures[address] = describe(err)
        if failures:
            raise WeightSyncError(failures)
        return options

    def push_grpc(
        self,
        named: list[tuple[str, torch.Tensor]],
        options: Mapping[str, weights_pb2.CommitOptions],
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        timeout_s: float | None = None,
    ) -> int:
        """Streams the tensors to each server in chunks of at most `chunk_bytes`."""
        manifest = manifest_to_proto(Manifest.of(named))

        def push_one(address: str) -> Any:
            header = weights_pb2.WeightUpdateHeader(manifest=manifest, options=options[address])
            requests = stream_requests(header, named, chunk_bytes)
            return self._stubs[address].UpdateWeights(requests, timeout=timeout_s, metadata=self._metadata)

        return self._on_every_server(push_one)

    # ---- shared memory / CUDA IPC (same machine) ---------------------------------------------------

    def push_shared(
        self,
        named: list[tuple[str, torch.Tensor]],
        options: Mapping[str, weights_pb2.CommitOptions],
        timeout_s: float | None = None,
    ) -> int:
        """Shares the tensors' storage in place and has every server (on this machine) copy from it.

        CPU tensors move once into shared memory and stay there (later pushes share them again for
        free); CUDA tensors are shared as IPC handles. Leave them unchanged until this returns.
        """
        tensors, host = views_to_proto(share_tensors(named)), this_host()

        def push_one(address: str) -> Any:
            request = weights_pb2.UpdateWeightsFromSharedRequest(
                tensors=tensors, options=options[address], host=host
            )
            call = self._stubs[address].UpdateWeightsFromShared
            return call(request, timeout=timeout_s, metadata=self._metadata)

        return self._on_every_server(push_one)

    # ---- disk ---------------------------------------------------------------------------------

    def push_disk(
        self,
        named: list[tuple[str, torch.Tensor]] | None,
        options: Mapping[str, weights_pb2.CommitOptions],
        path: str | os.PathLike | None = None,
        server_path: str | None = None,
        max_shard_bytes: int | None = None,
        timeout_s: float | None = None,
    ) -> int:
        """Writes a checkpoint to `path` (when tensors are given), then has every server load it.

        `server_path` is where the servers see that directory, when it differs from `path`.
        """
        if path is None:
            raise ValueError("path: the disk transport needs a checkpoint directory")
        if named is not None:
            save_checkpoint(named, path, max_shard_bytes)

        def push_one(address: str) -> Any:
            request = weights_pb2.UpdateWeightsFromDiskRequest(
                path=str(server_path or path), options=options[address]
            )
            call = self._stubs[address].UpdateWeightsFromDisk
            return call(request, timeout=timeout_s, metadata=self._metadata)

        return self._on_every_server(push_one)

    # ---- torch.distributed (group_pusher.py) ----------------------------------------------------

    def init_group(
        self,
        master_addr: str = "127.0.0.1",
        master_port: int = 0,
        backend: str = "gloo",
        timeout_s: float = DEFAULT_GROUP_TIMEOUT_S,
        device: torch.device | None = None,
    ) -> None:
        """Creates the broadcast group: this process is rank 0 and hosts the store at master_addr.

        `master_addr` must be this machine's address as the servers reach it; port 0 picks a free one.
        Servers get ranks 1..N in address order (a fleet's front: one per replica, consecutive).
        """
        self._group.init(master_addr, master_port, backend, timeout_s, device)

    def push_distributed(
        self,
        named: list[tuple[str, torch.Tensor]],
        options: Mapping[str, weights_pb2.CommitOptions],
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        **group_kwargs: Any,
    ) -> int:
        """Broadcasts the tensors in packed buckets; sets up the group first if there is none."""
        return self._group.push(named, options, self._settle, bucket_bytes, **group_kwargs)

    def close_group(self) -> None:
        """Leaves the broadcast group (servers replace theirs on the next InitWeightGroup)."""
        self._group.close()

    def _on_every_server(self, push_one: Callable[[str], Any]) -> int:
        """Runs `push_one` (a response) for every server concurrently; raises naming each failed server."""
        with ThreadPoolExecutor(max_workers=len(self.addresses)) as pool:
            futures = {address: pool.submit(push_one, address) for address in self.addresses}
        return self._settle(futures)

    def _settle(self, futures: Mapping[str, Any]) -> int:
        """Waits for every server and pins the base each that committed holds now; raises naming the
        failed ones, else returns the highest version."""
        failures = future_failures(futures, wait=True)
        results = {a: f.result() for a, f in futures.items() if a not in failures}
        for address, response in results.items():
            self.bases.record(address, response)
        versions = {a: r.weight_version for a, r in results.items()}
        if failures:
            raise WeightSyncError(failures, versions)
        return max(versions.values())


def push_weights(
    client: Any,
    model_or_named_tensors: nn.Module | NamedTensors | None,
    transport: str = "grpc",
    version: int | None = None,
    **kwargs: Any,
) -> int:
    """Updates every server of `client` (a RolloutClient, or a WeightPusher); returns the new version.

    A RolloutClient has one WeightPusher, `client.weight_pusher`, so the distributed group set up by
    the first distributed update is reused by the next ones.
    """
    return pusher_for(client).push(model_or_named_tensors, transport, version, **kwargs)


def pusher_for(client: Any) -> WeightPusher:
    """`client` itself if it is a WeightPusher, else the RolloutClient's `weight_pusher`."""
    return client if isinstance(client, WeightPusher) else client.weight_pusher


def _named(
    model_or_named_tensors: nn.Module | NamedTensors, lora: LoraTargets | str | None
) -> tuple[list[tuple[str, torch.Tensor]], LoraTargets | None]:
    source, lora = update_source(model_or_named_tensors, lora)
    return unique_named_tensors(source), lora


def stream_requests(
    header: weights_pb2.WeightUpdateHeader, named: list[tuple[str, torch.Tensor]], chunk_bytes: int
):
    yield weights_pb2.UpdateWeightsRequest(header=header)
    for offset, data in iter_byte_chunks((tensor for _, tensor in named), chunk_bytes):
        yield weights_pb2.UpdateWeightsRequest(chunk=weights_pb2.WeightChunk(offset=offset, data=data))
