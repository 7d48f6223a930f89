"""How long a call may still take: the client's gRPC deadline, read the same way by every handler."""

from __future__ import annotations

import grpc


def deadline_seconds(context: grpc.ServicerContext) -> float | None:
    """Seconds left before the client's deadline; None when the call has none (gRPC reports ~inf)."""
    remaining = context.time_remaining()
    return None if remaining is None or remaining > 1e6 else max(remaining, 0.0)
