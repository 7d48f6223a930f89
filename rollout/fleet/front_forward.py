"""How the gRPC front forwards a call to one replica: routed by CacheAffinityRouter, failed over.

A GrpcCall carries what the router reads: the session (metadata `x-session-id`; the protos have no
`user` field) and the first prompt's text, whose prefixes follow the prompt's. A generate request
without a seed gets one here, and one request id, as the OpenAI ingress does: when its replica dies,
the same call on another replica samples exactly the same tokens, so nothing is lost. A stream that
loses its replica is replayed and the samples the caller already has are skipped (a sample is one
message, whole; each carries its own weight versions).
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
from ray.exceptions import RayActorError
from ray.serve.exceptions import ReplicaUnavailableError

from rollout.fleet.replica_calls import SESSION_HEADER, GrpcCall, GrpcReply
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.server.callers import CALLER_METADATA_KEY

MAX_ATTEMPTS = 3
NO_DEADLINE_S = 10**7
LOST = (RayActorError, ReplicaUnavailableError)  # the replica died or became unreachable with the call
FORWARDED = ("authorization", CALLER_METADATA_KEY)
HEAD_FIELDS = ("prompt_token_ids", "prompt_logprobs", "num_cached_tokens")


def grpc_call(method: str, request: Any, context: grpc.ServicerContext, prefix: str = "") -> GrpcCall:
    """`request` for `method` on a replica, with the caller's auth and identity (its fair share)."""
    metadata = dict(context.invocation_metadata() or ())
    forwarded = [(k, str(metadata[k])) for k in FORWARDED if k in metadata]
    if CALLER_METADATA_KEY not in metadata:  # else every caller would be the front's one channel
        forwarded.append((CALLER_METADATA_KEY, f"peer:{context.peer()}"))
    session = metadata.get(SESSION_HEADER)
    remaining = context.time_remaining()  # a call without a deadline: a huge number
    return GrpcCall(
        method,
        request.SerializeToString(),
        tuple(forwarded),
        remaining if remaining is not None and remaining < NO_DEADLINE_S else None,
        str(session) if session else None,
        prefix,
    )


def seeded(request: Any) -> Any:
    """A Generate/GenerateBatch request with a request id and a seed (a retry elsewhere is the same).

    A request id the caller chose gives the seed (a client retrying it gets the same samples, as one
    server answers a retry with the samples it made); without one, the seed is random."""
    out = type(request)()
    out.CopyFrom(request)
    if not out.params.HasField("seed"):
        named = out.request_id
        digest = hashlib.sha256(named.encode()).digest() if named else None
        out.params.seed = int.from_bytes(digest[:4], "big") >> 1 if digest else random.getrandbits(31)
    if not out.request_id:
        out.request_id = uuid.uuid4().hex
    return out


def prompt_prefix(prompts: Any) -> str:
    """The first prompt as text whose prefixes follow its tokens' (token ids, text, chat messages)."""
    if not prompts:
        return ""
    prompt = prompts[0]
    kind = prompt.WhichOneof("prompt")
    if kind == "token_ids":
        return "".join(f"{t}," for t in prompt.token_ids.ids)
    if kind == "chat":  # a later turn's messages extend an earlier turn's
        chat = prompt.chat
        return chat.tools_json + "".join(m.SerializeToString().hex() + ";" for m in chat.messages)
    return prompt.text


def forward_unary(front: Any, call: GrpcCall, context: grpc.ServicerContext) -> bytes:
    """The reply's bytes from one replica, retried on another when it dies; its status otherwise."""
    for attempt in range(MAX_ATTEMPTS):
        try:
            reply = front.handle.grpc_unary.remote(call).result()
        except LOST as exc:
            if attempt == MAX_ATTEMPTS - 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"the replicas serving this call died: {exc}")
            continue
        return answer(reply, context)
    raise AssertionError("unreachable")


def answer(reply: GrpcReply, context: grpc.ServicerContext) -> bytes:
    if reply.code != "OK":
        context.abort(grpc.StatusCode[reply.code], reply.details)
    return reply.body


def forward_generate(
    front: Any, call: GrpcCall, context: grpc.ServicerContext
) -> Iterator[pb.GenerateResponse]:
    """A Generate stream; replayed on another replica when its own dies, without repeating a sample."""
    sent: set[tuple[int, int]] = set()
    for attempt in range(MAX_ATTEMPTS):
        stream = front.handle.options(stream=True).grpc_stream.remote(call)
        context.add_callback(stream.cancel)  # the caller left: the replica's call is cancelled
        try:
            for item in stream:
                if isinstance(item, GrpcReply):
                    answer(item, context)
                    return
                message = pb.GenerateResponse.FromString(item)
                key = (message.prompt_index, message.sample.index)
                if key in sent:
                    continue
                if any(prompt == message.prompt_index for prompt, _ in sent):
                    for name in HEAD_FIELDS:  # only the first message of a prompt carries them
                        message.ClearField(name)
                sent.add(key)
                yield message
            return
        except LOST as exc:
            if attempt == MAX_ATTEMPTS - 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"the replicas serving this stream died: {exc}")
