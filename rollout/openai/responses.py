"""Engine outputs -> OpenAI response objects, with rollout's token-exact extensions.

Beyond OpenAI's fields every response carries `prompt_token_ids`, and every choice its sampled
`token_ids` (vLLM's `return_token_ids` names), `weight_version` and `weight_versions` (spans: first
token index, version that sampled it). Logprobs are the engine's, per sampled token. Runs on the
HTTP worker threads (detokenizing and tool parsing never run on the engine loop's thread).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.openai.tool_parsers import PARSERS
from rollout.outputs import CompletionOutput
from rollout.protocol.prompts import detokenize, token_texts


@dataclass(frozen=True)
class ReplyOptions:
    """How one request wants its choices written."""

    tokenizer: Any
    tool_parser: str = "none"
    logprobs: bool = False
    top_logprobs: int = 0
    token_ids: bool = True
    skip_special_tokens: bool = True


def chat_choice(sample: CompletionOutput, index: int, opts: ReplyOptions) -> dict[str, Any]:
    text = _text(sample, opts)
    reply = PARSERS[opts.tool_parser](text)
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    finish = sample.finish_reason
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
        finish = "tool_calls" if finish == "stop" else finish
    choice = {"index": index, "message": message, "finish_reason": finish}
    choice["logprobs"] = {"content": _chat_logprobs(sample, opts)} if opts.logprobs else None
    return choice | _extensions(sample, opts)


def completion_choice(sample: CompletionOutput, index: int, opts: ReplyOptions) -> dict[str, Any]:
    text = _text(sample, opts)
    choice = {"index": index, "text": text, "finish_reason": sample.finish_reason}
    choice["logprobs"] = _completion_logprobs(sample, opts) if opts.logprobs else None
    return choice | _extensions(sample, opts)


def _text(sample: CompletionOutput, opts: ReplyOptions) -> str:
    """The sample's text (cut before a stop string, vLLM's rule); decoded here only when it has none."""
    if sample.text is not None:
        return sample.text
    return detokenize(opts.tokenizer, sample.token_ids, opts.skip_special_tokens)


def usage(prompt_lens: list[int], completion: int) -> dict[str, int]:
    prompt = sum(prompt_lens)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _extensions(sample: CompletionOutput, opts: ReplyOptions) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "weight_version": sample.weight_version,
        "weight_versions": [list(span) for span in sample.weight_versions],
    }
    if opts.token_ids:
        fields["token_ids"] = list(sample.token_ids)
    return fields


def _chat_logprobs(sample: CompletionOutput, opts: ReplyOptions) -> list[dict[str, Any]]:
    texts = token_texts(opts.tokenizer, sample.token_ids)
    entries = []
    for i, (text, logprob) in enumerate(zip(texts, sample.logprobs or [], strict=True)):
        entry = {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []}
        for alt, alt_logprob in _top(sample, i, opts):
            entry["top_logprobs"].append({"token": alt, "logprob": alt_logprob, "bytes": list(alt.encode())})
        entries.append(entry)
    return entries


def _completion_logprobs(sample: CompletionOutput, opts: ReplyOptions) -> dict[str, Any]:
    texts = token_texts(opts.tokenizer, sample.token_ids)
    offsets, at = [], 0
    for text in texts:
        offsets.append(at)
        at += len(text)
    top = [dict(_top(sample, i, opts)) for i in range(len(texts))] if opts.top_logprobs else None
    return {
        "tokens": texts,
        "token_logprobs": list(sample.logprobs or []),
        "top_logprobs": top,
        "text_offset": offsets,
    }


def _top(sample: CompletionOutput, position: int, opts: ReplyOptions) -> list[tuple[str, float]]:
    """The k most likely tokens at `position` (the engine adds the sampled one when it is not among them)."""
    if not opts.top_logprobs or not sample.top_logprobs:
        return []
    ranked = sorted(sample.top_logprobs[position].items(), key=lambda item: -item[1])[: opts.top_logprobs]
    texts = token_texts(opts.tokenizer, [token for token, _ in ranked])
    return [(text, logprob) for text, (_, logprob) in zip(texts, ranked, strict=True)]
