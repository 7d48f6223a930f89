"""Whether a chat request that re-sends earlier assistant turns as text keeps the prefix invariant.

Without token-in, the whole conversation is re-rendered each turn. For each earlier assistant turn,
the prompt the model saw then (the template on the messages before it, with the generation prompt)
must be a token prefix of this request's prompt, and the template must write that turn's reasoning
and content back as given; otherwise a trainer would compute ratios on tokens the model never saw.
The reply says what was found (`prefix_stable`, `prefix_break`); runs on the front end's worker threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout.protocol.prompts import render_chat, tokenize_rendered


@dataclass(frozen=True)
class PrefixBreak:
    """The first assistant turn whose tokens this prompt does not hold as they were."""

    message: int  # index in `messages` of that assistant message
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"message": self.message, "reason": self.reason}


def prefix_break(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    prompt_text: str,
    prompt_ids: list[int],
    tools: list | None = None,
) -> PrefixBreak | None:
    """None when every assistant turn's prompt and texts survive into (`prompt_text`, `prompt_ids`),
    the rendering of the whole of `messages`; one rendering and one tokenization per assistant turn."""
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    prompts = [_turn_prompt(tokenizer, messages[:i], tools) for i in turns]
    for k, (i, text) in enumerate(zip(turns, prompts, strict=True)):
        if text is None:
            return PrefixBreak(i, "the chat template refuses the messages before this turn on their own")
        if not prompt_text.startswith(text):
            return PrefixBreak(
                i, "the chat template renders this turn's prompt differently once later messages follow"
            )
        ids = tokenize_rendered(tokenizer, text)
        if prompt_ids[: len(ids)] != ids:
            return PrefixBreak(i, "this turn's prompt tokenizes differently inside the whole conversation")
        after = prompts[k + 1] if k + 1 < len(prompts) else None
        end = len(after) if after is not None and prompt_text.startswith(after) else len(prompt_text)
        if not _in_order(prompt_text[len(text) : end], _sampled_texts(messages[i])):
            return PrefixBreak(
                i, "the chat template does not write this turn's reasoning and content back as given"
            )
    return None


def _turn_prompt(tokenizer: Any, before: Sequence[Mapping[str, Any]], tools: list | None) -> str | None:
    try:
        return render_chat(tokenizer, before, None, tools)
    except ValueError:
        return None


def _sampled_texts(message: Mapping[str, Any]) -> list[str]:
    """What the model wrote in that turn, in order: its reasoning, then its content."""
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return [t for t in (reasoning, content) if isinstance(t, str) and t]


def _in_order(text: str, parts: list[str]) -> bool:
    at = 0
    for part in parts:
        found = text.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True
