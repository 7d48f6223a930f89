"""Engine outputs -> OpenAI response objects, with rollout's token-exact extensions.

Beyond OpenAI's fields every response carries `prompt_token_ids`, and every choice its sampled
`token_ids` (vLLM's `return_token_ids` names), `weight_version` and `weight_versions` (spans: first
token index, version that sampled it), and with logprobs `logprobs_mode` (what they hold: vLLM's
"processed_logprobs" | "raw_logprobs" | "processed_logits" | "raw_logits"). Logprobs are the engine's,
per sampled token. Runs on the
HTTP worker threads (detokenizing and tool parsing never run on the engine loop's thread).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.detokenize.token_bytes import token_bytes
from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.openai.tools.tool_parsers import PARSERS
from rollout.outputs import CompletionOutput
from rollout.protocol.prompts import detokenize, token_texts

LOGPROB_FLOOR = -9999.0


@dataclass(frozen=True)
class ReplyOptions:
    """How one request wants its choices written."""

    tokenizer: Any
    tool_parser: str = "none"
    logprobs: bool = False
    top_logprobs: int = 0
    token_ids: bool = True
    skip_special_tokens: bool = True
    named_tool: bool = False  # tool_choice named one function: finish_reason stays "stop" (OpenAI's, vLLM's)
    logprobs_mode: str | None = None  # the request's (or the server's default) vLLM logprobs mode


def chat_choice(sample: CompletionOutput, index: int, opts: ReplyOptions) -> dict[str, Any]:
    message, finish = chat_message(sample, opts)
    choice = {"index": index, "message": message, "finish_reason": finish}
    choice["logprobs"] = {"content": _sample_logprobs(chat_logprobs, sample, opts)} if opts.logprobs else None
    return choice | extensions(sample, opts)


def chat_message(sample: CompletionOutput, opts: ReplyOptions) -> tuple[dict[str, Any], str]:
    """The assistant message (its tool calls parsed out of the text) and the finish reason."""
    reply = PARSERS[opts.tool_parser](reply_text(sample, opts))
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    finish = sample.finish_reason
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
        finish = "tool_calls" if finish == "stop" and not opts.named_tool else finish
    return message, finish


def completion_choice(sample: CompletionOutput, index: int, opts: ReplyOptions) -> dict[str, Any]:
    text = reply_text(sample, opts)
    choice = {"index": index, "text": text, "finish_reason": sample.finish_reason}
    choice["logprobs"] = _sample_logprobs(completion_logprobs, sample, opts) if opts.logprobs else None
    return choice | extensions(sample, opts)


def reply_text(sample: CompletionOutput, opts: ReplyOptions) -> str:
    """The sample's text (cut before a stop string, vLLM's rule); decoded here only when it has none."""
    if sample.text is not None:
        return sample.text
    return detokenize(opts.tokenizer, sample.token_ids, opts.skip_special_tokens)


def _sample_logprobs(write: Any, sample: CompletionOutput, opts: ReplyOptions) -> Any:
    return write(sample.token_ids, sample.token_logprobs or [], sample.top_logprobs, opts)


def usage(prompt_lens: list[int], completion: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; `cached_tokens`: prompt tokens served from the prefix cache (every
    response carries it, 0 included)."""
    prompt = sum(prompt_lens)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def extensions(sample: CompletionOutput, opts: ReplyOptions) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "weight_version": sample.weight_version,
        "weight_versions": [list(span) for span in sample.weight_versions],
    }
    if opts.token_ids:
        fields["token_ids"] = list(sample.token_ids)
    if opts.logprobs:  # what the returned logprobs hold: vLLM's mode names (docs/openai.md)
        fields["logprobs_mode"] = sample.logprobs_mode or opts.logprobs_mode
    return fields


def chat_logprobs(
    token_ids: list[int], logprobs: list[float], tops: list[dict[int, float]] | None, opts: ReplyOptions
) -> list[dict[str, Any]]:
    """Chat's `logprobs.content` entries for these tokens (a whole sample's, or a stream chunk's)."""
    texts = token_texts(opts.tokenizer, token_ids)
    entries = []
    for i, (token, text, logprob) in enumerate(zip(token_ids, texts, logprobs, strict=True)):
        entry = {
            "token": text,
            "logprob": _floor(logprob),
            "bytes": _bytes(opts, token, text),
            "top_logprobs": [],
        }
        for alt_id, alt, alt_logprob in _top(tops, i, opts):
            alt_entry = {"token": alt, "logprob": _floor(alt_logprob), "bytes": _bytes(opts, alt_id, alt)}
            entry["top_logprobs"].append(alt_entry)
        entries.append(entry)
    return entries


def _bytes(opts: ReplyOptions, token_id: int, text: str) -> list[int]:
    """The token's true UTF-8 bytes, a partial character's included (detokenize/token_bytes.py)."""
    with TOKENIZER_LOCK:
        return token_bytes(opts.tokenizer, token_id, text)


def completion_logprobs(
    token_ids: list[int],
    logprobs: list[float],
    tops: list[dict[int, float]] | None,
    opts: ReplyOptions,
    offset: int = 0,
) -> dict[str, Any]:
    """Completions' `logprobs` for these tokens; `text_offset` counts on from `offset` (the length of
    the token texts before them, in a stream)."""
    texts = token_texts(opts.tokenizer, token_ids)
    offsets = []
    for text in texts:
        offsets.append(offset)
        offset += len(text)
    top = (
        [{t: _floor(lp) for _, t, lp in _top(tops, i, opts)} for i in range(len(texts))]
        if opts.top_logprobs
        else None
    )
    values = [_floor(v) for v in logprobs]
    return {"tokens": texts, "token_logprobs": values, "top_logprobs": top, "text_offset": offsets}


def _floor(logprob: float) -> float:
    """JSON has no -inf (a token a processor dropped): vLLM's floor, max(logprob, -9999.0) (serving_chat.py,
    serving_completion.py), so such a reply is written rather than failing."""
    return max(logprob, LOGPROB_FLOOR)


def _top(
    tops: list[dict[int, float]] | None, position: int, opts: ReplyOptions
) -> list[tuple[int, str, float]]:
    """(id, text, logprob) of the k most likely tokens at `position` (the engine adds the sampled one when
    it is not among them)."""
    if not opts.top_logprobs or not tops:
        return []
    ranked = sorted(tops[position].items(), key=lambda item: -item[1])[: opts.top_logprobs]
    texts = token_texts(opts.tokenizer, [token for token, _ in ranked])
    return [(token, text, logprob) for text, (token, logprob) in zip(texts, ranked, strict=True)]
