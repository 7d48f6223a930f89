"""A streamed reply's server-sent events -> the body the non-streamed reply would have had (what turn.py reads).

Chat: `prompt_token_ids` on the first chunk, each choice's logprob entries across its chunks, and its
`token_ids`, `weight_versions` and `finish_reason` on its final chunk. Responses: the final event's
`response` (`response.completed`, `.incomplete` or `.failed`). A stream cut before its end gives nothing.
"""

from __future__ import annotations

import json
from typing import Any

FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def events(raw: bytes) -> list[dict[str, Any]]:
    """The JSON `data:` payloads of an SSE body, `[DONE]` left out."""
    out = []
    for block in raw.decode("utf-8", errors="replace").split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in block.splitlines() if line.startswith("data:"))
        if data and data != "[DONE]":
            try:
                out.append(json.loads(data))
            except json.JSONDecodeError:
                continue
    return out


def chat_body(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not chunks or "prompt_token_ids" not in chunks[0]:
        return None
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for part in chunk.get("choices", []):
            choice = choices.setdefault(part["index"], {"index": part["index"], "logprobs": None})
            entries = (part.get("logprobs") or {}).get("content")
            if entries is not None:
                choice["logprobs"] = {"content": (choice["logprobs"] or {"content": []})["content"] + entries}
            if part.get("finish_reason") is not None:
                for key in ("token_ids", "weight_versions", "finish_reason"):
                    choice[key] = part.get(key)
    finished = [c for c in choices.values() if "token_ids" in c]
    first = chunks[0]
    return {"id": first.get("id"), "prompt_token_ids": first["prompt_token_ids"], "choices": finished} | {
        k: first[k] for k in ("prefix_stable",) if k in first
    }


def response_body(payloads: list[dict[str, Any]]) -> dict[str, Any] | None:
    for payload in reversed(payloads):
        if payload.get("type") in FINAL_EVENTS:
            return payload.get("response")
    return None
