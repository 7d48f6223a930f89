"""The body of `POST /v1/responses`, as a pydantic model: OpenAI's fields, vLLM's sampling extensions, ours.

Unknown fields are refused (400 naming them), types are strict, as for chat (requests/schemas.py). Fields
that change nothing here (`user`, `metadata`, `service_tier`, `prompt_cache_key`, `safety_identifier`,
`prompt_cache_retention`, `text.verbosity`) are accepted; features this server has not (`background`,
`conversation`, `prompt`, `max_tool_calls`, `context_management`, `reasoning`, `truncation: "auto"`)
are refused naming the field when set (to_chat.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rollout.openai.requests.schemas import SEED_MAX


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = Field(None, ge=0)
    include: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    store: bool | None = None  # None: stored (OpenAI's default)
    previous_response_id: str | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    # refused when set (to_chat.py)
    reasoning: dict[str, Any] | None = None
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    max_tool_calls: int | None = None
    context_management: list[Any] | None = None
    # vLLM's sampling extensions (extra_body), as in chat
    seed: int | None = Field(None, ge=0, le=SEED_MAX)
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    stop: str | list[str] | list[int] | None = None
    stop_token_ids: list[int] | None = None
    min_tokens: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None  # checked as chat checks it ([-100, 100])
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    return_token_ids: bool | None = None
    logprobs_mode: str | None = None
    # Token-in (ours, as in chat): the exact tokens of the conversation so far
    prompt_token_ids: list[int] | None = None

    @property
    def stored(self) -> bool:
        return self.store is not False

    @property
    def logprobs(self) -> bool:
        """OpenAI returns output_text logprobs when `include` asks for them (top_logprobs implies it)."""
        return "message.output_text.logprobs" in (self.include or ()) or self.top_logprobs is not None
