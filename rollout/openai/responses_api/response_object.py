"""A chat reply -> OpenAI's Response object, with rollout's token-exact extensions.

Output items: a `message` with one `output_text` when the reply has content (none when it is only tool
calls), then a `function_call` per parsed call (`call_id` the chat call's id). `status` is "completed",
"incomplete" with `incomplete_details.reason: "max_output_tokens"` when the sample ran out of tokens,
"cancelled" when it was aborted. Beyond OpenAI's fields the Response carries `prompt_token_ids`,
`token_ids`, `token_logprobs` and `logprobs_mode` (when logprobs are asked: every sampled token's, tool-call
tokens too, and what they hold),
`weight_version`, `weight_versions`, `finish_reason` (the engine's) and, for re-rendered conversations,
`prefix_stable` / `prefix_break`, as chat does. `output_text.logprobs` lists every sampled token too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.openai.responses_api.schemas import ResponsesRequest

STATUS = {"length": "incomplete", "abort": "cancelled"}


@dataclass(frozen=True)
class Reply:
    """What one sampled reply says, streamed or not."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    logprobs: list[dict[str, Any]] | None  # chat's logprob entries of every sampled token, when asked
    token_ids: list[int]
    weight_version: int
    weight_versions: list[list[int]]
    logprobs_mode: str | None = None  # what `logprobs` hold (vLLM's mode names), when asked

    @classmethod
    def of_choice(cls, choice: dict[str, Any]) -> Reply:
        """From a non-streamed chat choice (replies/response_objects.py)."""
        message = choice["message"]
        logprobs = choice.get("logprobs")
        return cls(
            message.get("content"),
            message.get("tool_calls") or [],
            choice["finish_reason"],
            None if logprobs is None else logprobs["content"],
            choice["token_ids"],
            choice["weight_version"],
            choice["weight_versions"],
            choice.get("logprobs_mode"),
        )

    @property
    def status(self) -> str:
        return STATUS.get(self.finish_reason, "completed")

    def message(self) -> dict[str, Any]:
        """The assistant chat message a later turn continues from."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {k: call[k] for k in ("id", "type", "function")} for call in self.tool_calls
            ]
        return message


def message_item(reply: Reply, item_id: str) -> dict[str, Any]:
    text = {"type": "output_text", "text": reply.content or "", "annotations": [], "logprobs": reply.logprobs}
    item_status = "incomplete" if reply.status == "incomplete" else "completed"
    return {"id": item_id, "type": "message", "role": "assistant", "status": item_status, "content": [text]}


def call_item(call: dict[str, Any], item_id: str) -> dict[str, Any]:
    function = call["function"]
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"],
        "status": "completed",
    }


def output_items(reply: Reply, response_id: str) -> list[dict[str, Any]]:
    items = [message_item(reply, message_id(response_id))] if reply.content is not None else []
    return items + [call_item(call, call_item_id(response_id, i)) for i, call in enumerate(reply.tool_calls)]


def message_id(response_id: str) -> str:
    return f"msg_{response_id}"


def call_item_id(response_id: str, index: int) -> str:
    return f"fc_{response_id}_{index}"


def response_head(
    response_id: str, created_at: int, model: str, req: ResponsesRequest, status: str = "in_progress"
) -> dict[str, Any]:
    """The Response's fields known before sampling (the `response.created` event's response)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "model": model,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "metadata": req.metadata,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls is not False,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_logprobs": req.top_logprobs,
        "max_output_tokens": req.max_output_tokens,
        "previous_response_id": req.previous_response_id,
        "store": req.stored,
        "tool_choice": req.tool_choice or "auto",
        "tools": req.tools or [],
        "text": req.text or {"format": {"type": "text"}},
        "truncation": req.truncation or "disabled",
        "reasoning": None,
        "user": req.user,
        "usage": None,
    }


def finished_response(
    head: dict[str, Any],
    reply: Reply,
    usage: dict[str, Any],
    prompt_ids: list[int],
    extensions: dict[str, Any],
    token_ids: bool,
) -> dict[str, Any]:
    """The whole Response once the reply is sampled (`usage` is chat's; `token_ids`: return the ids)."""
    incomplete = {"reason": "max_output_tokens"} if reply.status == "incomplete" else None
    fields = {
        "status": reply.status,
        "incomplete_details": incomplete,
        "output": output_items(reply, head["id"]),
        "usage": responses_usage(usage),
        "weight_version": reply.weight_version,
        "weight_versions": reply.weight_versions,
        "finish_reason": reply.finish_reason,
    }
    if token_ids:
        fields |= {"prompt_token_ids": prompt_ids, "token_ids": reply.token_ids}
    if reply.logprobs is not None:
        fields["token_logprobs"] = [entry["logprob"] for entry in reply.logprobs]
        fields["logprobs_mode"] = reply.logprobs_mode
    return head | fields | extensions


def responses_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Chat's usage in the Responses names (`cached_tokens` when the chat usage counts them, else 0)."""
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["total_tokens"],
    }
