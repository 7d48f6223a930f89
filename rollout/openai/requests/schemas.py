"""The request bodies of /v1/completions and /v1/chat/completions, as pydantic models.

Unknown fields are refused (400 naming them), as OpenAI's API does: a field this server does not know
would otherwise be silently dropped. Types are strict, as OpenAI checks them: `max_tokens: true`,
`stream: "yes"` or `temperature: "0.5"` are 400 naming the field, never read as 1, true and 0.5 (an
integer is still a number). `seed` fits a signed 64-bit integer, as OpenAI's and vLLM's (gRPC's is an
int64 too), and is not negative (SamplingParams' rule); a `logit_bias` value lies in [-100, 100]
(OpenAI refuses the rest; vLLM clamps them silently). Fields OpenAI defines that change nothing here
(`user`, `metadata`, `store`) are accepted (`parallel_tool_calls` counts with a forced `tool_choice`,
tools/forced_calls.py); vLLM's sampling extensions arrive at the top level (the `openai` client sends `extra_body` there). The token-in field `prompt_token_ids`
is ours. Messages and tools are checked as OpenAI does in message_schema.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SEED_MAX = 2**63 - 1
Bias = Annotated[float, Field(ge=-100, le=100)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False
    continuous_usage_stats: bool = False


class SamplingFields(BaseModel):
    """What both endpoints share: OpenAI's sampling fields and vLLM's `extra_body` extensions."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    n: int = 1
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = Field(None, ge=0, le=SEED_MAX)
    stop: str | list[str] | list[int] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Bias] | None = None
    # vLLM's extensions (extra_body)
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    return_token_ids: bool | None = None  # None: returned (rollout's default); False: left out
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    # SamplingParams.logprobs_mode: vLLM's four modes, or rollout's aliases; unset: the server's --logprobs-mode
    logprobs_mode: (
        Literal["processed_logprobs", "raw_logprobs", "processed_logits", "raw_logits", "processed", "raw"]
        | None
    ) = None
    bad_words_token_ids: list[list[int]] | None = None  # rollout's: bad words given as token sequences
    # Structured outputs (rollout/openai/requests/structured_fields.py): OpenAI's response_format, vLLM's
    # structured_outputs object and its older guided_* keys
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None  # top alternatives per token (0: the sampled token's logprob only)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    # Token-in (ours): the exact tokens of the conversation so far, i.e. the previous turn's
    # prompt_token_ids + that choice's token_ids; messages after the last assistant one are appended.
    prompt_token_ids: list[int] | None = None
