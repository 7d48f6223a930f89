"""ChoiceStream fed one token at a time: deltas never split a character, and deltas + the final chunk
equal the non-streamed reply (content, tool calls, stop-string cut)."""

from __future__ import annotations

from typing import Any

from rollout import SamplingParams
from rollout.engine.output.token_stream import TokenDelta
from rollout.openai.replies.response_objects import ReplyOptions, chat_message
from rollout.openai.streaming.choice_stream import ChoiceStream
from rollout.outputs import CompletionOutput
from tests.detokenize.tokenizer_builders import byte_bpe
from tests.openai.openai_builders import hermes_tokenizer

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def streamed(
    tokenizer: Any, text: str, params: SamplingParams, parser: str = "none"
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """(chunk choices while running, the final one, the non-streamed message) for a reply of `text`."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    opts = ReplyOptions(tokenizer, parser)
    stream = ChoiceStream(0, [1], params, opts, chat=True)
    chunks = [stream.push([TokenDelta("r", 0, i, t)]) for i, t in enumerate(ids[:-1])]
    sample = stream.complete(CompletionOutput(0, ids, None, None, "length", 0))
    final = stream.finish(sample)
    unstreamed = ChoiceStream(0, [1], params, opts, chat=True).complete(sample)
    return [c for c in chunks if c is not None], final, chat_message(unstreamed, opts)[0]


def joined(chunks: list[dict[str, Any]], final: dict[str, Any]) -> str:
    return "".join(c["delta"].get("content", "") for c in [*chunks, final])


def test_a_multi_byte_character_goes_out_once_whole() -> None:
    text = "a 😀 b ç 漢字 ok"  # the byte-level BPE splits each of these characters over several tokens
    chunks, final, message = streamed(byte_bpe(), text, SamplingParams(max_tokens=64))
    pieces = [c["delta"]["content"] for c in chunks]
    assert pieces[:4] == ["a", " 😀", " ", "b"]
    assert "\ufffd" not in "".join(pieces)
    assert joined(chunks, final) == message["content"] == text


def test_a_tool_call_goes_out_in_the_final_chunk_and_the_text_before_it_streams() -> None:
    chunks, final, message = streamed(hermes_tokenizer(), f"Let me look. {CALL} ", SamplingParams(), "hermes")
    assert "".join(c["delta"].get("content", "") for c in chunks) == "Let me look."
    assert joined(chunks, final) == message["content"]
    calls = [
        {k: v for k, v in call.items() if k not in ("id", "index")} for call in final["delta"]["tool_calls"]
    ]
    assert calls == [{k: v for k, v in call.items() if k != "id"} for call in message["tool_calls"]]
    assert final["finish_reason"] == "length"


def test_text_past_a_stop_string_never_goes_out() -> None:
    params = SamplingParams(stop=["wörld"])
    chunks, final, message = streamed(byte_bpe(), "héllo wörld 👋 naïve", params)
    assert not any("w" in c["delta"].get("content", "") for c in chunks)
    assert joined(chunks, final) == message["content"] == "héllo "
    assert final["finish_reason"] == "stop"
