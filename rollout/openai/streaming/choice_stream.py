"""ChoiceStream: one streamed choice, its sampled tokens in, OpenAI chunk choices out (worker threads).

Tokens go through the sample's SampleText (incremental detokenizer + stop strings, the state that
`finish_text` then completes for the finished sample), so a multi-byte character goes out once
whole. Text a stop string could still cut is held back (vLLM's buffer: the longest stop string
minus one character), and so is text a tool parser may yet take (tool_stream.py); tokens after a
stop string are dropped. The finished sample closes the choice: its final chunk carries the text
and logprobs not sent yet, tool calls, `finish_reason` and rollout's extensions, so the deltas
concatenate to the non-streamed reply exactly (checked: a mismatch is an error, never a wrong text).
"""

from __future__ import annotations

from typing import Any

from rollout.detokenize.finish_text import finish_text
from rollout.detokenize.sample_text import SampleText
from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.engine.output.token_stream import TokenDelta
from rollout.openai.replies.response_objects import (
    ReplyOptions,
    chat_logprobs,
    chat_message,
    completion_logprobs,
    extensions,
    reply_text,
)
from rollout.openai.tools.tool_stream import content_end
from rollout.outputs import CompletionOutput
from rollout.sampling_params import SamplingParams


class StreamMismatchError(RuntimeError):
    """The streamed tokens or text disagree with the finished sample (a server bug: reported, not sent)."""


class ChoiceStream:
    """`push(tokens)` -> the chunk choice for them (None when nothing can go out yet); once the sample
    finished, `complete(sample)` -> it with its text and stop-string cut, `finish(that)` -> the final
    chunk choice."""

    def __init__(
        self, index: int, prompt_ids: list[int], params: SamplingParams, opts: ReplyOptions, chat: bool
    ) -> None:
        self.index, self.prompt_ids, self.params, self.opts, self.chat = index, prompt_ids, params, opts, chat
        decode = opts.tokenizer is not None and params.detokenize  # else the text comes whole at the end
        self.text = SampleText(opts.tokenizer, prompt_ids, params) if decode else None
        self.hold = _stop_hold(params)
        self.parser = opts.tool_parser if chat else "none"
        self.token_ids: list[int] = []  # tokens of the sample so far (up to a stop string)
        self.num_received = 0  # tokens received, past a stop string included
        self.sent: list[str] = []  # text pieces sent
        self.num_sent_chars = 0
        self.text_offset = 0  # completions: the summed token texts sent (logprobs' text_offset)

    def push(self, tokens: list[TokenDelta]) -> dict[str, Any] | None:
        kept = self._take(tokens)
        piece = self._new_text()
        if not piece and not (kept and self.opts.logprobs):
            return None
        ids = [t.token_id for t in kept]
        logprobs = [t.logprob for t in kept]
        tops = [t.top_logprobs for t in kept] if self.opts.top_logprobs else None
        return self._chunk(piece, ids, logprobs, tops) | {"finish_reason": None}

    def complete(self, sample: CompletionOutput) -> CompletionOutput:
        """The finished sample's text and cut (finish_text), from the text state the stream kept."""
        if sample.token_ids[: len(self.token_ids)] != self.token_ids:
            raise StreamMismatchError(
                f"choice {self.index}: the finished sample's tokens differ from the stream's"
            )
        return finish_text(sample, self.opts.tokenizer, self.prompt_ids, self.params, self.text)

    def finish(self, sample: CompletionOutput) -> dict[str, Any]:
        """The final chunk choice of a `complete`d sample: what the stream has not sent yet."""
        streamed = len(self.token_ids)
        if self.chat:
            message, finish = chat_message(sample, self.opts)
            text, calls = message["content"] or "", message.get("tool_calls")
        else:
            text, calls, finish = reply_text(sample, self.opts), None, sample.finish_reason
        sent = "".join(self.sent)
        if not text.startswith(sent):
            raise StreamMismatchError(
                f"choice {self.index}: the finished text does not extend the streamed text"
            )
        rest = slice(streamed, None)
        tops = sample.top_logprobs[rest] if sample.top_logprobs else None
        chunk = self._chunk(
            text[len(sent) :], sample.token_ids[rest], (sample.token_logprobs or [])[rest], tops
        )
        if calls:
            chunk["delta"]["tool_calls"] = [call | {"index": i} for i, call in enumerate(calls)]
        return chunk | {"finish_reason": finish} | extensions(sample, self.opts)

    def _take(self, tokens: list[TokenDelta]) -> list[TokenDelta]:
        """The tokens that belong to the sample (none after a stop string), pushed into its text."""
        kept = []
        with TOKENIZER_LOCK:
            for token in tokens:
                if token.position != self.num_received:
                    raise StreamMismatchError(
                        f"choice {self.index}: token {token.position} arrived, {self.num_received} expected"
                    )
                self.num_received += 1
                if self.text is not None:
                    if self.text.stop_string is not None:
                        continue
                    self.text.push(token.token_id)
                self.token_ids.append(token.token_id)
                kept.append(token)
        return kept

    def _new_text(self) -> str:
        """The text that can go out now and has not yet."""
        if self.text is None:
            return ""
        text = self.text.text
        end = len(text) if self.text.stop_string is not None else max(len(text) - self.hold, 0)
        end = content_end(self.parser, text, end)
        if end <= self.num_sent_chars:
            return ""
        piece = text[self.num_sent_chars : end]
        self.sent.append(piece)
        self.num_sent_chars = end
        return piece

    def _chunk(
        self, piece: str, ids: list[int], logprobs: list, tops: list[dict[int, float]] | None
    ) -> dict[str, Any]:
        """A chunk choice with `piece` and these tokens' logprobs (when asked), without finish_reason."""
        if self.chat:
            entries = chat_logprobs(ids, logprobs, tops, self.opts) if self.opts.logprobs else None
            delta = {"content": piece} if piece else {}
            chunk = {
                "index": self.index,
                "delta": delta,
                "logprobs": None if entries is None else {"content": entries},
            }
            return chunk | self._mode()
        found = (
            completion_logprobs(ids, logprobs, tops, self.opts, self.text_offset)
            if self.opts.logprobs
            else None
        )
        if found is not None:
            self.text_offset += sum(len(t) for t in found["tokens"])
        return {"index": self.index, "text": piece, "logprobs": found} | self._mode()

    def _mode(self) -> dict[str, Any]:
        """What a chunk's logprobs hold (the final chunk's extensions state the sample's own)."""
        return {"logprobs_mode": self.opts.logprobs_mode} if self.opts.logprobs else {}


def _stop_hold(params: SamplingParams) -> int:
    """Characters held back while unfinished: a stop string may still complete in them (and be cut)."""
    if not params.stop or params.include_stop_str_in_output:
        return 0
    return max(len(s) for s in params.stop) - 1
