"""A refusal the caller should retry later: RESOURCE_EXHAUSTED with a `retry-after` hint (seconds).

The hint rides as trailing metadata, HTTP's header name: `RolloutClient` retries only refusals that
carry it (a message over the size limit is RESOURCE_EXHAUSTED too, and retrying it is pointless).
"""

from __future__ import annotations

import grpc

from rollout.server.admission import AdmissionRefusedError

RETRY_AFTER_KEY = "retry-after"


def abort_retry_later(
    context: grpc.ServicerContext, refusal: AdmissionRefusedError, advice: str = ""
) -> None:
    """Ends the call RESOURCE_EXHAUSTED with the refusal's message and its retry-after hint."""
    context.set_trailing_metadata(((RETRY_AFTER_KEY, str(refusal.retry_after_s)),))
    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{refusal}{'; or ' + advice if advice else ''}")
