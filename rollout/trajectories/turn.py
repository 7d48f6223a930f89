"""Turn: one sampled reply as a trainer needs it, read from the server's JSON (chat or Responses).

Chat replies carry `prompt_token_ids` at the top and `token_ids`, `weight_versions` per choice, logprobs in
`logprobs.content`; Responses carry all of them at the top (`token_logprobs`). A reply without token ids
(another server, or `return_token_ids: false`) cannot be trained on exactly: None, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Turn:
    prompt_ids: list[int]
    completion_ids: list[int]  # what the model sampled (EOS included when sampled)
    logprobs: list[float] | None  # one per completion token, when the request asked for logprobs
    weight_versions: list[tuple[int, int]]  # (first completion index, weight version that sampled it)
    finish_reason: str | None
    endpoint: str  # "chat" or "responses"
    choice: int = 0
    response_id: str | None = None
    server_prefix_stable: bool | None = None  # the server's own check of a re-rendered conversation
    # Set by the episode (episode.py): the earlier turn this one continues, and whether it continues one.
    parent: int | None = None
    prefix_stable: bool | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> list[int]:
        """The prompt and the completion: what a later turn's prompt must start with."""
        return self.prompt_ids + self.completion_ids


def chat_turns(body: dict[str, Any]) -> list[Turn]:
    """Each choice of a chat completion (or of a stream assembled by stream_capture.py)."""
    prompt = body.get("prompt_token_ids")
    if prompt is None:
        return []
    turns = []
    for choice in body.get("choices", []):
        ids = choice.get("token_ids")
        if ids is None:
            continue
        entries = (choice.get("logprobs") or {}).get("content")
        turns.append(
            Turn(
                list(prompt),
                list(ids),
                None if entries is None else [e["logprob"] for e in entries],
                _spans(choice.get("weight_versions")),
                choice.get("finish_reason"),
                "chat",
                choice.get("index", 0),
                body.get("id"),
                body.get("prefix_stable"),
            )
        )
    return turns


def response_turns(body: dict[str, Any]) -> list[Turn]:
    """A Response's one reply (rollout's extensions at its top level)."""
    if body.get("prompt_token_ids") is None or body.get("token_ids") is None:
        return []
    logprobs = body.get("token_logprobs")
    turn = Turn(
        list(body["prompt_token_ids"]),
        list(body["token_ids"]),
        None if logprobs is None else list(logprobs),
        _spans(body.get("weight_versions")),
        body.get("finish_reason"),
        "responses",
        0,
        body.get("id"),
        body.get("prefix_stable"),
    )
    return [turn]


def _spans(spans: list[list[int]] | None) -> list[tuple[int, int]]:
    return [(int(start), int(version)) for start, version in spans or ()]
