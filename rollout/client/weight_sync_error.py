"""WeightSyncError: which servers did not take a weight update, and why, from each call's outcome."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import grpc


class WeightSyncError(RuntimeError):
    """Some servers did not take the update; `failures` maps each one's address to why.

    A server whose call failed at its deadline may still have committed at the last instant; push
    again with `update_id=error.update_id` (or the same explicit `version=` and tensors) and a server
    that has it answers with its version without applying it twice.
    """

    def __init__(
        self, failures: Mapping[str, str], versions: Mapping[str, int] | None = None, update_id: str = ""
    ) -> None:
        self.failures = dict(failures)
        self.versions = dict(versions or {})
        self.update_id = update_id
        lines = [f"{address}: {why}" for address, why in self.failures.items()]
        done = f"; updated: {self.versions}" if self.versions else ""
        super().__init__(
            f"weight update failed on {len(self.failures)} server(s): " + "; ".join(lines) + done
        )


def future_failures(futures: Mapping[str, Any], wait: bool = False) -> dict[str, str]:
    """{address: why} of the calls that failed (all of them waited for with `wait`, else those done)."""
    failures = {}
    for address, future in futures.items():
        if not wait and not future.done():
            continue
        error = future.exception()
        if error is not None:
            failures[address] = describe(error)
    return failures


def describe(error: BaseException) -> str:
    """A failure as text: `STATUS: details` for a gRPC error, `Type: message` for any other."""
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return f"{error.code().name}: {error.details()}"
    return f"{type(error).__name__}: {error}"
