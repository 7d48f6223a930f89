"""StreamSplice: a streamed OpenAI reply continued on another replica after its first byte, exactly.

The ingress gives every request a seed, and a seeded sample's noise is a function of (seed, sample
index, position) alone (engine/sample/sampling_noise.py), so the same request replayed on another
replica of the same weights samples the same tokens. When the replica streaming a reply dies, the
ingress replays the request and splices: of each choice's replayed text (every string field of its
deltas) and logprobs it drops what the caller already has, after checking it is exactly that, and
relays the rest under the original chunk id (logprobs are compared by token: their values may
differ in the last bits with the batch a replica ran). Anything that differs (a fleet update committed in
between) ends the stream with an error event instead: the caller never gets a reply that is not
one sample. The replay computes the streamed tokens again (the OpenAI API has no partial-sample
field; gRPC's resume does carry one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

STANDARD_KEYS = {"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}


class SpliceMismatchError(RuntimeError):
    """The replayed reply is not the one streamed so far (so it cannot continue it)."""


@dataclass
class ChoiceState:
    texts: dict[str, str] = field(default_factory=dict)  # delta field (or "text") -> text streamed
    logprobs: list[Any] = field(default_factory=list)  # chat: entries; completions: per-token rows
    role_sent: bool = False
    finished: bool = False


@dataclass
class StreamLog:
    """What the caller has received of one stream (SSE events parsed from the relayed bytes)."""

    head: dict[str, Any] | None = None  # the first chunk (its id, created)
    choices: dict[int, ChoiceState] = field(default_factory=dict)
    done: bool = False
    _buffer: bytes = b""

    def record(self, data: bytes) -> None:
        """Parses the bytes relayed to the caller (events may span relayed pieces)."""
        self._buffer += data
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            payload = _data(event)
            if payload == "[DONE]":
                self.done = True
            elif payload is not None:
                self._chunk(json.loads(payload))

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if "choices" not in chunk:
            return
        self.head = self.head or chunk
        for choice in chunk["choices"]:
            state = self.choices.setdefault(choice["index"], ChoiceState())
            for key, text in _texts(choice).items():
                state.texts[key] = state.texts.get(key, "") + text
            state.logprobs += _logprob_rows(choice.get("logprobs"))
            state.role_sent |= "role" in choice.get("delta", {})
            state.finished |= choice.get("finish_reason") is not None


class StreamSplice:
    """Filters a replayed stream's events into the continuation of `log`'s (bytes to relay)."""

    def __init__(self, log: StreamLog) -> None:
        self.log = log
        self.replayed: dict[int, ChoiceState] = {}
        self._buffer = b""

    def feed(self, data: bytes) -> bytes:
        """The bytes of `data` (replayed) the caller gets; raises SpliceMismatchError."""
        self._buffer += data
        out = b""
        while b"\n\n" in self._buffer:
            event, self._buffer = self._buffer.split(b"\n\n", 1)
            payload = _data(event)
            if payload is None or payload == "[DONE]":
                out += event + b"\n\n"
                continue
            chunk = self._continue(json.loads(payload))
            if chunk is not None:
                out += f"data: {json.dumps(chunk)}\n\n".encode()
        return out

    def _continue(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        if "choices" not in chunk or self.log.head is None:
            return chunk  # an error event, or nothing was streamed before
        chunk = {k: v for k, v in chunk.items() if k in STANDARD_KEYS}  # the first chunk's fields went out
        chunk |= {"id": self.log.head["id"], "created": self.log.head.get("created", chunk.get("created"))}
        if not chunk["choices"]:
            return chunk  # the usage chunk
        kept = [c for c in (self._choice(choice) for choice in chunk["choices"]) if c is not None]
        return chunk | {"choices": kept} if kept else None

    def _choice(self, choice: dict[str, Any]) -> dict[str, Any] | None:
        """The part of a replayed choice the caller has not got (None: nothing new)."""
        index = choice["index"]
        sent = self.log.choices.get(index, ChoiceState())
        seen = self.replayed.setdefault(index, ChoiceState())
        choice = json.loads(json.dumps(choice))  # a copy to trim
        for key, text in _texts(choice).items():
            before, already = seen.texts.get(key, ""), sent.texts.get(key, "")
            seen.texts[key] = now = before + text
            _check_prefix(index, key, now, already)
            _set_text(choice, key, now[max(len(already), len(before)) :])
        rows = _logprob_rows(choice.get("logprobs"))
        start = len(seen.logprobs)
        seen.logprobs += rows
        overlap = sent.logprobs[start : start + len(rows)]
        if [_token(r) for r in rows[: len(overlap)]] != [_token(r) for r in overlap]:
            raise SpliceMismatchError(f"choice {index}: the replayed tokens differ from the streamed ones")
        _trim_logprobs(choice, len(overlap))
        if sent.role_sent:
            choice.get("delta", {}).pop("role", None)
        if sent.finished:
            return None
        new = any(_texts(choice).values()) or _logprob_rows(choice.get("logprobs"))
        other = set(choice.get("delta", {})) - {"content", "role"} - set(_texts(choice))
        if new or other or choice.get("finish_reason") is not None:
            return choice
        return None


def _data(event: bytes) -> str | None:
    lines = [line[5:].strip() for line in event.decode().splitlines() if line.startswith("data:")]
    return "\n".join(lines) if lines else None


def _texts(choice: dict[str, Any]) -> dict[str, str]:
    """A choice's streamed text fields: a chat delta's strings (content, reasoning), a completion's text."""
    if "delta" in choice:
        return {k: v for k, v in choice["delta"].items() if isinstance(v, str) and k != "role"}
    return {"text": choice["text"]} if isinstance(choice.get("text"), str) else {}


def _set_text(choice: dict[str, Any], key: str, text: str) -> None:
    if "delta" in choice:
        choice["delta"][key] = text
    else:
        choice[key] = text


def _logprob_rows(logprobs: Any) -> list[Any]:
    """One row per token: chat's `content` entries, or a completion's columns zipped."""
    if not logprobs:
        return []
    if "content" in logprobs:
        return list(logprobs["content"] or [])
    columns = [logprobs[k] for k in ("tokens", "token_logprobs", "top_logprobs") if logprobs.get(k)]
    return [list(row) for row in zip(*columns, strict=True)]


def _token(row: Any) -> Any:
    """A logprobs row's token (its logprob may differ in the last bits with the batch it ran in)."""
    return row.get("token") if isinstance(row, dict) else row[0]


def _trim_logprobs(choice: dict[str, Any], drop: int) -> None:
    logprobs = choice.get("logprobs")
    if not logprobs or not drop:
        return
    if "content" in logprobs:
        logprobs["content"] = (logprobs["content"] or [])[drop:]
        return
    for key, column in list(logprobs.items()):
        if isinstance(column, list):
            logprobs[key] = column[drop:]


def _check_prefix(index: int, key: str, replayed: str, streamed: str) -> None:
    common = min(len(replayed), len(streamed))
    if replayed[:common] != streamed[:common]:
        raise SpliceMismatchError(
            f"choice {index}: the replayed {key} differs from the streamed one at character "
            f"{next(i for i in range(common) if replayed[i] != streamed[i])}"
        )
