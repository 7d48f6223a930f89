"""BasePins: per server, the base this client last left there, which every adapter push names.

An adapter is right only on the base it was trained on (rollout/weights/weight_base.py). After each
update a server answers with the base it then holds (its boot id and the version that set it); the
pusher pins it per address and names it in the next adapter push, so a server that restarted, or
that took another writer's full update since, refuses that push and changes nothing. Before any
update from this client the pin is the weights the server loaded, in the process this client first
reached there (`BootIds.first`; asked with GetServerInfo when the client has not called it yet).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import grpc

from rollout.client.boot_ids import BootIds
from rollout.protocol.generated import rollout_pb2, rollout_pb2_grpc, weights_pb2
from rollout.protocol.weights_wire import base_from_proto
from rollout.weights.weight_base import WeightBase


class BasePins:
    """The base pinned per address; `named(address)` pins the loaded weights when nothing is pinned yet."""

    def __init__(
        self,
        channels: Mapping[str, grpc.Channel],
        metadata: Sequence[tuple[str, str]] = (),
        boot_ids: BootIds | None = None,
    ) -> None:
        self._channels, self._metadata, self._boot_ids = channels, tuple(metadata), boot_ids
        self._pins: dict[str, WeightBase] = {}
        self._lock = threading.Lock()

    def pinned(self) -> dict[str, WeightBase]:
        with self._lock:
            return dict(self._pins)

    def named(self, address: str) -> WeightBase:
        """The base an adapter push to `address` names."""
        with self._lock:
            pin = self._pins.get(address)
        if pin is None:
            pin = WeightBase(self._first_boot_id(address), 0)
            with self._lock:
                pin = self._pins.setdefault(address, pin)
        return pin

    def record(self, address: str, response: object) -> None:
        """Pins the base an update's response says the server holds now."""
        base = getattr(response, "base", None)
        if isinstance(base, weights_pb2.WeightBase) and response.HasField("base"):
            with self._lock:
                self._pins[address] = base_from_proto(base)

    def _first_boot_id(self, address: str) -> str:
        first = self._boot_ids.first().get(address) if self._boot_ids is not None else None
        if first:
            return first
        stub = rollout_pb2_grpc.RolloutServiceStub(self._channels[address])
        return stub.GetServerInfo(rollout_pb2.GetServerInfoRequest(), metadata=self._metadata).boot_id
