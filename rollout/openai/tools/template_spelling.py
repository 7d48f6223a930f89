"""The tool-call spelling a chat template writes, read off the template itself, for forced calls.

A forced call (forced_calls.py) should be sampled exactly as the template writes calls back in later turns:
then a framework that re-renders the history gets the model's own tokens again, and the prefix holds. So the
template renders an assistant turn holding one call, then two, with a sentinel name and arguments; the text
around them is the spelling (its turn opening is the generation prompt, its closing what a plain reply's
content is followed by). It is used only when the server's tool parser reads it back as the same call; else
(arguments the template quotes as a string, a spelling the parser does not know, a template that fails
on the sentinels) the parser's usual spelling is used, as before.
"""

from __future__ import annotations

import json
from typing import Any

from rollout.openai.tools.forced_calls import Spelling
from rollout.openai.tools.tool_parsers import PARSERS
from rollout.protocol.prompts import render_chat

NAME = "rollout_sentinel_tool"
ARGUMENTS = '{"rollout_sentinel_argument": 0}'
CONTENT = "rollout sentinel content"
USER = {"role": "user", "content": "rollout sentinel question"}


def template_spelling(tokenizer: Any, parser: str) -> Spelling | None:
    """The template's spelling of calls when `parser` reads it back; None otherwise (or without a template)."""
    if parser not in PARSERS or parser == "none" or not getattr(tokenizer, "chat_template", None):
        return None
    try:
        one, two, plain = (_assistant_text(tokenizer, reply) for reply in (_calls(1), _calls(2), _plain()))
    except Exception:  # a template is user code: any failure means "use the parser's spelling"
        return None
    closing = plain[plain.find(CONTENT) + len(CONTENT) :] if CONTENT in plain else None
    if closing is None or not one.endswith(closing) or not two.endswith(closing):
        return None
    one, two = one[: len(one) - len(closing)], two[: len(two) - len(closing)]
    spelling = _spelling(one, two)
    return spelling if spelling is not None and _reads_back(spelling, parser) else None


def _spelling(one: str, two: str) -> Spelling | None:
    name_at, arguments_at = one.find(NAME), one.find(ARGUMENTS)
    if name_at < 0 or arguments_at < name_at or not two.startswith(one) or not two.endswith(one):
        return None
    separator = two[len(one) : len(two) - len(one)]
    before_arguments = one[name_at + len(NAME) : arguments_at]
    return Spelling(one[:name_at], before_arguments, one[arguments_at + len(ARGUMENTS) :], separator)


def _reads_back(spelling: Spelling, parser: str) -> bool:
    call = spelling.call("get_weather", '{"city": "Paris"}')
    replies = [PARSERS[parser](call), PARSERS[parser](call + spelling.separator + call)]
    expected = [("get_weather", {"city": "Paris"})]
    return all(
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.tool_calls]
        == expected * count
        and not (reply.content or "").strip()
        for count, reply in enumerate(replies, start=1)
    )


def _assistant_text(tokenizer: Any, reply: dict[str, Any]) -> str:
    """What the template writes for `reply` after the generation prompt of the turn before it."""
    prompt = render_chat(tokenizer, [USER])
    full = render_chat(tokenizer, [USER, reply], add_generation_prompt=False)
    if not full.startswith(prompt):
        raise ValueError("the template renders the turn before differently")
    return full[len(prompt) :]


def _calls(count: int) -> dict[str, Any]:
    call = {"id": "call_sentinel", "type": "function", "function": {"name": NAME, "arguments": ARGUMENTS}}
    return {"role": "assistant", "content": None, "tool_calls": [call] * count}


def _plain() -> dict[str, Any]:
    return {"role": "assistant", "content": CONTENT}
