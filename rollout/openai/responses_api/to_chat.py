"""A Responses request -> the chat request it is served as (vLLM serves Responses on its chat path too).

So the mapping to SamplingParams, the chat template, token-in, forced tool calls and the prefix check are
chat's, unchanged. The conversation is the stored one of `previous_response_id` (its messages, without
its instructions, as OpenAI's) followed by `input`; `instructions` become a leading system message.
Continuing a stored response is token-in: the new prompt starts with that response's exact prompt and
completion tokens, as long as the instructions are the same and the new items add no assistant turn
(else the conversation is rendered whole and the reply says whether the prefix held: `prefix_stable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rollout.openai.requests.schemas import ChatCompletionRequest
from rollout.openai.responses_api.input_items import (
    chat_messages,
    chat_response_format,
    chat_tool_choice,
    chat_tools,
)
from rollout.openai.responses_api.response_store import ResponseStore
from rollout.openai.responses_api.schemas import ResponsesRequest

# Responses fields without a server feature behind them: refused when set, naming them.
REFUSED = ("reasoning", "background", "conversation", "prompt", "max_tool_calls", "context_management")
PASSED = (
    "model",
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "stream",
    "seed",
    "top_k",
    "min_p",
    "repetition_penalty",
    "stop",
    "stop_token_ids",
    "min_tokens",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "ignore_eos",
    "skip_special_tokens",
    "logprobs_mode",
)


@dataclass(frozen=True)
class ChatPlan:
    """The chat request, and the conversation a later `previous_response_id` continues (no instructions)."""

    chat: ChatCompletionRequest
    conversation: list[dict[str, Any]]


def to_chat(req: ResponsesRequest, store: ResponseStore) -> ChatPlan:
    """ValueError naming the Responses field; ResponseNotFoundError for an unknown previous_response_id."""
    _refuse_unsupported(req)
    new = chat_messages(req.input)
    conversation, prefix = list(new), req.prompt_token_ids
    if req.previous_response_id is not None:
        if prefix is not None:
            raise ValueError(
                "prompt_token_ids: not with previous_response_id, whose tokens the server holds already"
            )
        previous = store.get(req.previous_response_id)
        conversation = [*previous.messages, *new]
        appendable = not any(m["role"] == "assistant" for m in new)
        if appendable and previous.instructions == req.instructions:
            prefix = list(previous.token_ids)
    system = [{"role": "system", "content": req.instructions}] if req.instructions else []
    fields = {name: getattr(req, name) for name in PASSED if getattr(req, name) is not None}
    fields |= {
        "messages": system + conversation,
        "max_tokens": req.max_output_tokens,
        "logprobs": req.logprobs,
        "top_logprobs": req.top_logprobs,
        "tools": chat_tools(req.tools),
        "tool_choice": chat_tool_choice(req.tool_choice),
        "response_format": chat_response_format(req.text),
        "prompt_token_ids": prefix,
    }
    try:
        chat = ChatCompletionRequest(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ValueError(f"{where}: {first.get('msg')}") from None
    return ChatPlan(chat, conversation)


def _refuse_unsupported(req: ResponsesRequest) -> None:
    for name in REFUSED:
        value = getattr(req, name)
        if value not in (None, False) and not (name == "reasoning" and not _reasoning_set(value)):
            raise ValueError(f"{name}: not supported by this server")
    if req.truncation == "auto":
        raise ValueError(
            'truncation: "auto" is not supported: a prompt past the context is refused, never cut'
        )


def _reasoning_set(reasoning: dict[str, Any]) -> bool:
    """`reasoning` asks for something only when one of its values is set (the Agents SDK may send nulls)."""
    return any(value is not None for value in reasoning.values())
