"""Who a gRPC call comes from, for the fair share and the admission bounds (admission.py, fair_share.py).

A caller is the `rollout-caller` metadata value when the call sends one (`RolloutClient(caller=...)`),
else the connection it came on: one channel, so one `RolloutClient` per server. Every call of a caller
shares its turn in the engine's admission and its share of the server's bounds. The bearer token
cannot tell callers apart (every client holds the same one).
"""

from __future__ import annotations

import grpc

CALLER_METADATA_KEY = "rollout-caller"


def grpc_caller(context: grpc.ServicerContext) -> str:
    named = [v for k, v in context.invocation_metadata() or () if k == CALLER_METADATA_KEY]
    if named and named[0]:
        return str(named[0])
    return f"peer:{context.peer()}"
