"""StreamSplice without a fleet: a replayed stream continues the streamed one exactly, or refuses."""

from __future__ import annotations

import json

import pytest

from rollout.fleet.stream_failover import SpliceMismatchError, StreamLog, StreamSplice


def _event(id_: str, choices: list[dict], **extra: object) -> bytes:
    return f"data: {json.dumps({'id': id_, 'created': 1, 'choices': choices, **extra})}\n\n".encode()


def _chat(text: str, tokens: list[str], finish: str | None = None, role: bool = False) -> dict:
    delta = {"role": "assistant", "content": text} if role else {"content": text}
    entries = [{"token": t, "logprob": -1.0} for t in tokens]
    return {"index": 0, "delta": delta, "logprobs": {"content": entries}, "finish_reason": finish}


def _replay(first: str) -> list[bytes]:
    return [
        _event("b", [_chat("", [], role=True)], prompt_token_ids=[1, 2]),
        _event("b", [_chat(first, ["h", "e"])]),
        _event("b", [_chat("llo", ["l", "l", "o"])]),
        _event("b", [_chat("!", ["!"], finish="length") | {"token_ids": [5, 6, 7, 7, 8, 9]}]),
        b"data: [DONE]\n\n",
    ]


def _sent() -> StreamLog:
    log = StreamLog()
    streamed = _event("a", [_chat("", [], role=True)]) + _event("a", [_chat("he", ["h", "e"])])
    streamed += _event("a", [_chat("l", ["l"])])
    for piece in (streamed[:7], streamed[7:30], streamed[30:]):  # events split across pieces
        log.record(piece)
    return log


def test_a_replay_continues_the_stream_with_only_what_the_caller_has_not_got() -> None:
    splice = StreamSplice(_sent())
    out = b"".join(splice.feed(piece) for piece in _replay("he"))
    events = [json.loads(line[6:]) for line in out.decode().splitlines() if line.startswith("data: {")]
    assert {e["id"] for e in events} == {"a"} and all("prompt_token_ids" not in e for e in events)
    choices = [c for e in events for c in e["choices"]]
    assert "".join(c["delta"]["content"] for c in choices) == "lo!"
    assert [t["token"] for c in choices for t in c["logprobs"]["content"]] == ["l", "o", "!"]
    assert choices[-1]["token_ids"] == [5, 6, 7, 7, 8, 9] and out.endswith(b"data: [DONE]\n\n")


def test_a_replay_that_samples_other_text_is_refused() -> None:
    splice = StreamSplice(_sent())
    with pytest.raises(SpliceMismatchError, match="content differs"):
        for piece in _replay("hx"):
            splice.feed(piece)


def _text(index: int, text: str, tokens: list[str], finish: str | None = None) -> dict:
    logprobs = {"tokens": tokens, "token_logprobs": [-1.0] * len(tokens), "text_offset": [0] * len(tokens)}
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}


def test_a_completion_replay_skips_a_finished_choice_and_trims_the_logprob_columns() -> None:
    log = StreamLog()
    log.record(_event("a", [_text(0, "ab", ["a", "b"]), _text(1, "x", ["x"], finish="stop")]))
    splice = StreamSplice(log)
    out = splice.feed(_event("b", [_text(0, "a", ["a"]), _text(1, "x", ["x"], finish="stop")]))
    out += splice.feed(_event("b", [_text(0, "bcd", ["b", "c", "d"], finish="length")]))
    choices = [c for line in out.decode().splitlines() if line for c in json.loads(line[6:])["choices"]]
    assert [(c["index"], c["text"], c["logprobs"]["tokens"]) for c in choices] == [(0, "cd", ["c", "d"])]
    assert choices[0]["logprobs"]["text_offset"] == [0, 0] and choices[0]["finish_reason"] == "length"
