"""What the fleet sends its engine replicas through Ray Serve, and what the router reads of it.

`OpenAICall` is one OpenAI request and `GrpcCall` one gRPC call of the fleet's gRPC front, as bytes
(the router reads their session key and prefix text); `GrpcReply` a replica's gRPC answer; `Targeted`
addresses one replica by id (weight staging and commits, stats, metrics: every replica in turn),
which the router honours exactly (affinity_router.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

SESSION_HEADER = "x-session-id"
FORWARDED_HEADERS = ("authorization", "x-rollout-caller")


@dataclass(frozen=True)
class OpenAICall:
    path: str  # "/chat/completions" or "/completions", under the replica's /v1
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def session(self) -> str | None:
        """The episode's key: the X-Session-Id header, else OpenAI's `user` field."""
        key = self.headers.get(SESSION_HEADER) or self.body.get("user")
        return str(key) if key else None

    def prefix_text(self) -> str:
        """Text whose prefixes follow the prompt's: tools, then each message in order (a later turn's
        text extends an earlier turn's); a token-in chat's `prompt_token_ids` first; for completions,
        the (first) prompt."""
        ids = self.body.get("prompt_token_ids")
        if "messages" in self.body and isinstance(ids, list):  # token-in chat: the prompt starts with ids
            return "".join(f"{t}," for t in ids) + json.dumps(self.body["messages"][-1:], sort_keys=True)
        if "messages" in self.body:
            head = json.dumps(self.body.get("tools") or [], sort_keys=True)
            return head + "".join(json.dumps(m, sort_keys=True) for m in self.body["messages"])
        prompt = self.body.get("prompt", "")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (list, str)):
            prompt = prompt[0]  # several prompts go to one replica: the first decides
        if isinstance(prompt, list):  # token ids
            return "".join(f"{t}," for t in prompt)
        return str(prompt)


@dataclass(frozen=True)
class ForwardedReply:
    status: int
    body: bytes
    media_type: str


@dataclass(frozen=True)
class Targeted:
    """A call for the replica `replica` (its Ray Serve unique id) and no other."""

    replica: str
    payload: Any = None


@dataclass(frozen=True)
class GrpcCall:
    """One RPC for a replica's own gRPC server: its full method name and serialized request."""

    method: str  # e.g. "/rollout.v1.RolloutService/Generate"
    request: bytes
    metadata: tuple[tuple[str, str], ...] = ()
    timeout: float | None = None  # what remains of the caller's deadline
    session: str | None = None  # the x-session-id metadata
    prefix: str = ""  # what the router matches cached prefixes by (grpc_routing.py)

    def prefix_text(self) -> str:
        return self.prefix


@dataclass(frozen=True)
class GrpcReply:
    """A replica's answer to a GrpcCall: `code` is a grpc.StatusCode name ("OK" with the body)."""

    code: str
    details: str = ""
    body: bytes = b""
