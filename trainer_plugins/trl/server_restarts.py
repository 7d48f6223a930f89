"""Riding out server restarts: notice one, wait for the server, check it again as at start-up.

A restarted server has lost the trainer's weights and may host another model or config; the next
push reaches it first, so weight versions alone cannot tell. Every response names the server process
that sent it (its boot id, rollout/client/boot_ids.py): `RestartWatch` keeps each server's restart count as
of the trainer's last checks, and any call that met a new process shows as a difference. `gone` tells
a server that stopped answering (restarting, or down) from one that refused something; an adapter
push refused for another base (rollout/weights/weight_base.py) means a restart or another writer too.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from rollout.client import RolloutClient
from rollout.client.generate_call import retryable
from rollout.client.load_balance import NoLiveServerError
from rollout.weights.weight_base import is_base_refusal

from . import server_checks
from .config import RolloutConfig

logger = logging.getLogger(__name__)


class RestartWatch:
    """The servers whose process changed since `trust` (or since it was made)."""

    def __init__(self, client: RolloutClient) -> None:
        self.client = client
        self._trusted = client.boot_ids.restarts()

    def restarted(self) -> list[str]:
        counts = self.client.boot_ids.restarts()
        return [address for address, n in counts.items() if n != self._trusted.get(address, 0)]

    def trust(self, counts: dict[str, int]) -> None:
        self._trusted = dict(counts)


def gone(exc: BaseException) -> bool:
    """A server stopped answering: UNAVAILABLE from a call or a push, or no live server left."""
    if isinstance(exc, NoLiveServerError):
        return True
    if isinstance(exc, grpc.RpcError):
        return retryable(exc)
    failures = getattr(exc, "failures", None)  # WeightSyncError: {address: "STATUS: details"}
    return bool(failures) and any(why.startswith("UNAVAILABLE") for why in failures.values())


def base_refused(exc: BaseException) -> bool:
    """An adapter push a server refused because it holds another base than the one the push named."""
    failures = getattr(exc, "failures", None)  # WeightSyncError: {address: "STATUS: details"}
    return bool(failures) and any(is_base_refusal(why) for why in failures.values())


def recovery_reason(exc: BaseException) -> str | None:
    """Why `exc` calls for a recovery (wait, check, push the full weights again), or None."""
    if gone(exc):
        return f"a server stopped answering: {exc}"
    if base_refused(exc):
        return (
            f"a server holds another base than the adapter push named (restarted, or another writer): {exc}"
        )
    return None


def recheck(
    client: RolloutClient, model: Any, tokenizer: Any, config: RolloutConfig
) -> tuple[RestartWatch, list[Any]]:
    """Waits up to `config.wait_timeout` for every server, then runs the start-up checks again.

    Returns a watch trusting the processes just checked, and each server's info. A server the client
    had written off gets prompts again once the wait finds it serving (RolloutClient.wait_until_ready).
    RolloutServerUnavailable when a server is still gone after the wait.
    """
    server_checks.wait_ready(client, config)  # its first answers name the processes checked below
    counts = client.boot_ids.restarts()  # before the checks: a restart during them shows afterwards
    infos = server_checks.check_server(client, model, tokenizer, config)
    watch = RestartWatch(client)
    watch.trust(counts)
    return watch, infos


def log_recovery(why: str, addresses: list[str], config: RolloutConfig) -> None:
    logger.warning(
        "rollout: %s (%s); waiting up to %g s for it, then checking it as at start-up, pushing the full "
        "weights again, probing, and generating the round again",
        why,
        ", ".join(addresses),
        config.wait_timeout,
    )
