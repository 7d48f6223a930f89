"""Token-in chat: the conversation so far as token ids, plus new messages rendered and appended.

Invariant: each turn's prompt starts with the exact tokens of every earlier turn (its prompt and the
sampled completion), so the trainer's importance ratios see the tokens the model saw. Re-rendering
the whole conversation cannot promise that (a template re-spells tool calls, drops reasoning, and
tokenization merges across turn boundaries), so only the messages after the last assistant turn
are rendered: the template's text after that turn, which the sampled tokens lack (its closing),
then the new messages and the generation prompt. A template that renders earlier turns differently
once the new ones follow is refused (`PrefixBreakError`), never silently re-tokenized.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rollout.protocol.prompts import render_chat, token_texts, tokenize_rendered

# Stands in for the last assistant turn's content: what the template writes after it is the closing.
SENTINEL = "\u2063rollout-turn-end\u2063"


class PrefixBreakError(ValueError):
    """The chat template cannot append the new messages without re-rendering earlier turns."""


def appended_prompt(
    tokenizer: Any,
    prefix_ids: list[int],
    messages: Sequence[Mapping[str, Any]],
    tools: list | None = None,
    max_chars: int | None = None,
) -> list[int]:
    """`prefix_ids` + the tokens of what the template adds after the last assistant turn."""
    if not prefix_ids:
        raise ValueError("prompt_token_ids: empty; send the previous turn's prompt and completion tokens")
    last = _last_assistant(messages)
    base = [*messages[:last], {"role": "assistant", "content": SENTINEL}]
    new = list(messages[last + 1 :])
    base_text = render_chat(tokenizer, base, max_chars, tools, add_generation_prompt=False)
    full_text = render_chat(tokenizer, [*base, *new], max_chars, tools)
    if SENTINEL not in base_text:
        raise PrefixBreakError(
            "messages: the chat template does not render the last assistant turn's content"
        )
    if not full_text.startswith(base_text):
        raise PrefixBreakError(
            "messages: the chat template renders the earlier turns differently once the new messages "
            "follow, so they cannot be appended to prompt_token_ids without re-tokenizing them"
        )
    closing = base_text[base_text.rindex(SENTINEL) + len(SENTINEL) :]
    bridge = _unsampled_closing(tokenizer, prefix_ids[-1], closing)
    return [*prefix_ids, *tokenize_rendered(tokenizer, bridge + full_text[len(base_text) :])]


def _last_assistant(messages: Sequence[Mapping[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    raise ValueError(
        "messages: with prompt_token_ids, the messages must hold the assistant turn those tokens end "
        "with; the messages after it are the ones appended"
    )


def _unsampled_closing(tokenizer: Any, last_id: int, closing: str) -> str:
    """The closing less the end-of-turn token the model sampled itself (`<|im_end|>`, `<|eot_id|>`)."""
    if last_id in set(getattr(tokenizer, "all_special_ids", ())):
        (last_text,) = token_texts(tokenizer, [last_id])
        if last_text and closing.startswith(last_text):
            return closing[len(last_text) :]
    return closing
