"""Checks of a parsed request that its pydantic types cannot state, made before anything is tokenized.

Every string must be Unicode text: JSON's `"\\ud800"` escape parses to a lone surrogate, which no
tokenizer encodes (it was a 500). Chat messages and tools follow OpenAI's rules (message_schema.py).
`top_logprobs` is checked as itself, since SamplingParams knows it only as `logprobs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rollout.openai.requests.schemas import ChatCompletionRequest, SamplingFields
from rollout.sampling_params.field_checks import check_unicode

# Fields of token ids only: nothing to check, and a long prompt of ids would cost a walk for nothing.
TOKEN_ID_FIELDS = frozenset(
    {"prompt_token_ids", "stop_token_ids", "allowed_token_ids", "bad_words_token_ids"}
)


def check_text(request: SamplingFields) -> None:
    """ValueError naming the path (`messages[0].content`, `prompt[1]`) of a string that is not Unicode."""
    for name, value in request:
        if name in TOKEN_ID_FIELDS or _token_ids(name, value):
            continue
        check_strings(value, name)


def check_strings(value: Any, field: str) -> None:
    """`check_unicode` on every string of a JSON value, keys included."""
    if isinstance(value, str):
        check_unicode(field, value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                check_unicode(field, key)
            check_strings(item, f"{field}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_strings(item, f"{field}[{i}]")


def check_top_logprobs(request: ChatCompletionRequest, vocab_size: int) -> None:
    """At most the vocabulary (>= 0 is the schema's); named `top_logprobs`, not the `logprobs` it becomes."""
    top = request.top_logprobs
    if top is not None and top > vocab_size:
        raise ValueError(
            f"top_logprobs: {top} alternatives asked, more than the {vocab_size} the vocabulary has"
        )


def _token_ids(name: str, value: Any) -> bool:
    """`prompt` and `stop` given as token ids (the schema's strict unions keep a list homogeneous)."""
    return (
        name in ("prompt", "stop")
        and isinstance(value, list)
        and bool(value)
        and not isinstance(value[0], str)
    )
