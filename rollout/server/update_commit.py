"""Commits a received weight update for one RPC, so that an error the caller sees means nothing changed.

The commit waits (for an idle engine under the in-flight policy "wait", for the next step boundary
under the others) at most until the call's deadline, is dropped if the caller goes away first, and checks on the loop thread, right before writing, that the call is still alive. A
retry of an update that did land (same `update_id`, or the current version with identical tensors)
is answered with that version and writes nothing. What remains is the instant between the write and
the reply reaching the client; the ledger makes a retry after that safe.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import torch

from rollout.protocol.generated import weights_pb2
from rollout.protocol.weights_wire import in_flight_policy, lora_targets, named_base, requested_version
from rollout.server.deadlines import deadline_seconds
from rollout.server.loop_jobs import wait_job
from rollout.weights.ledger import UpdateLedger, equals_model
from rollout.weights.lora import LoraTargets
from rollout.weights.updater import check_next_version
from rollout.weights.weight_base import WeightBase, check_base, relies_on_held_base


class CallerGoneError(Exception):
    """The RPC ended (deadline, cancel, disconnect) before its commit ran; nothing was written."""


class ExclusiveSubmitter(Protocol):
    engine: Any  # LLMEngine

    def submit_exclusive(self, fn: Callable[[Any], Any], abort_running: bool = False) -> Future: ...

    def submit_call(self, fn: Callable[[Any], Any]) -> Future: ...


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """What the commit of one update needs to know about it."""

    options: weights_pb2.CommitOptions

    @property
    def version(self) -> int | None:
        return requested_version(self.options)

    @property
    def update_id(self) -> str:
        return self.options.update_id

    @property
    def in_flight(self) -> str:
        """The in-flight policy (rollout/engine/versions/in_flight.py); ValueError naming the field if invalid."""
        return in_flight_policy(self.options)

    @property
    def lora(self) -> LoraTargets | None:
        """The LoRA adapters the update carries by module (rollout/weights/lora.py); None: none."""
        return lora_targets(self.options)

    @property
    def base(self) -> WeightBase | None:
        """The base the update's adapters merge into, if it names one (rollout/weights/weight_base.py)."""
        return named_base(self.options)


def held_base(engine: Any, boot_id: str) -> WeightBase:
    """The base `engine` holds, as the server process `boot_id` names it."""
    return WeightBase(boot_id, engine.adapters.base_version)


def precheck_version(engine: Any, ledger: UpdateLedger, request: UpdateRequest) -> int | None:
    """Refuses a version that can never commit, before any byte is received.

    Returns the version an update with this id already set (the caller answers with it at once),
    else None. The current version is let through only as a possible retry (decided at the commit).
    """
    request.in_flight  # noqa: B018 - validates the policy before any byte is received
    known = ledger.version_of(request.update_id)
    if known is not None:
        return known
    if not ledger.is_retry_of_current(request.version, engine.weight_version):
        check_next_version(engine.weight_version, request.version)
    return None


def commit_for_call(
    loop: ExclusiveSubmitter,
    ledger: UpdateLedger,
    request: UpdateRequest,
    tensors: dict[str, torch.Tensor],
    context: grpc.ServicerContext,
    boot_id: str = "",
) -> tuple[int, WeightBase]:
    """Commits `tensors` under the request's in-flight policy; returns the version serving after it
    and the base then held (server process `boot_id`).

    "wait" commits once the engine is idle; "abort", "keep" and "recompute" at the next step boundary.
    The base the request names is checked on the loop thread, the engine's only writer, right before
    the write (BaseMismatchError). TimeoutError if the commit could not run before the call's deadline;
    CallerGoneError if the call ended first. In both cases the job never ran.
    """

    def commit(engine: Any) -> tuple[int, WeightBase]:
        if not context.is_active():
            raise CallerGoneError("the call ended before its commit; nothing was written")
        known = ledger.version_of(request.update_id)
        if known is not None:
            return known, held_base(engine, boot_id)
        check_base(request.base, held_base(engine, boot_id), relies_on_held_base(tensors, lora))
        if ledger.is_retry_of_current(request.version, engine.weight_version) and equals_model(
            engine.model, engine.weights.resolve(tensors, lora)
        ):
            return engine.weight_version, held_base(engine, boot_id)
        named = request.base.version if request.base is not None else None
        version = engine.update_weights(
            tensors, request.version, in_flight=policy, lora=lora, base_version=named
        )
        ledger.record(request.update_id, version)
        return version, held_base(engine, boot_id)

    policy, lora = request.in_flight, request.lora
    if policy == "wait":
        future = loop.submit_exclusive(commit, request.options.abort_running)
    else:
        future = loop.submit_call(commit)
    if not context.add_callback(future.cancel):
        future.cancel()
    try:
        return wait_job(future, deadline_seconds(context))
    except CancelledError:
        raise CallerGoneError(
            "the call ended while waiting for an idle engine; nothing was written"
        ) from None
