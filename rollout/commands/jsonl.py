"""JSONL records of `rollout generate`: one prompt per input line, one result per output line.

Input: {"prompt": str} | {"messages": [{"role", "content", ...}...]} | {"prompt_token_ids": [int...]}
(messages reach the chat template whole: tool calls, tool results, names, content parts),
plus optional "sampling_params" (overrides of the command-line SamplingParams) and "id" (copied to
the output). A bad line raises LineError naming the line number and the field.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from rollout.outputs import RequestOutput
from rollout.sampling_params import SamplingParams

PROMPT_KEYS = ("prompt", "messages", "prompt_token_ids")
_PARAM_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}


class LineError(ValueError):
    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class PromptLine:
    line: int
    prompt: str | list[int] | list[dict[str, Any]]
    params: SamplingParams
    record_id: Any = None


def parse_line(line: int, text: str, base: SamplingParams) -> PromptLine:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LineError(line, f"invalid JSON: {exc}") from None
    if not isinstance(record, dict):
        raise LineError(line, "each line must be a JSON object")
    present = [k for k in PROMPT_KEYS if k in record]
    if len(present) != 1:
        raise LineError(line, f"exactly one of {', '.join(PROMPT_KEYS)} is required, got {present or 'none'}")
    key = present[0]
    return PromptLine(line, _prompt(line, key, record[key]), _params(line, record, base), record.get("id"))


def _prompt(line: int, key: str, value: Any) -> str | list[int] | list[dict[str, Any]]:
    if key == "prompt":
        if not isinstance(value, str) or not value:
            raise LineError(line, "prompt: must be a non-empty string")
        return value
    if key == "prompt_token_ids":
        if not isinstance(value, list) or not value or not all(_is_int(t) for t in value):
            raise LineError(line, "prompt_token_ids: must be a non-empty list of integers")
        return value
    if not isinstance(value, list) or not value:
        raise LineError(line, "messages: must be a non-empty list of message objects")
    for i, message in enumerate(
        value
    ):  # the rest (tool calls, content parts, null content) goes to the template
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise LineError(line, f"messages[{i}]: must be an object with a string role")
    return value


def _params(line: int, record: dict[str, Any], base: SamplingParams) -> SamplingParams:
    overrides = record.get("sampling_params", {})
    if not isinstance(overrides, dict):
        raise LineError(line, "sampling_params: must be an object")
    unknown = sorted(set(overrides) - _PARAM_FIELDS)
    if unknown:
        raise LineError(line, f"sampling_params: unknown field(s) {', '.join(unknown)}")
    try:
        return dataclasses.replace(base, **overrides)
    except (ValueError, TypeError) as exc:
        raise LineError(line, f"sampling_params.{exc}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def output_record(item: PromptLine, output: RequestOutput) -> dict[str, Any]:
    record: dict[str, Any] = {"line": item.line}
    if item.record_id is not None:
        record["id"] = item.record_id
    record["request_id"] = output.request_id
    record["prompt_token_ids"] = output.prompt_token_ids
    record["samples"] = [
        {
            "index": s.index,
            "token_ids": s.token_ids,
            "text": s.text,
            "logprobs": s.token_logprobs,
            "top_logprobs": [{str(t): lp for t, lp in p.items()} for p in s.top_logprobs]
            if s.top_logprobs
            else None,
            "finish_reason": s.finish_reason,
            "stop_reason": s.stop_reason,
            "cumulative_logprob": s.cumulative_logprob,
            "logprobs_mode": s.logprobs_mode if s.logprobs is not None else None,
            "weight_version": s.weight_version,
        }
        for s in output.outputs
    ]
    return record
