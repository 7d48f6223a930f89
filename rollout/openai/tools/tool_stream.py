"""How much of a chat reply's text can be streamed as content before its tool parser has seen it all.

The parsers (tool_parsers.py) read the finished text: `hermes` removes `<tool_call>` blocks and
strips the rest when a call parses, `llama3_json` turns a reply that opens with `{` (or the python
tag) into calls and no content. A streamed delta is never taken back, so only text that is content
in the final message whatever follows may go out early: for `hermes`, what precedes the first
(possibly still partial) `<tool_call>`, without trailing whitespace, once the reply starts with a
non-space; for `llama3_json`, everything once the reply's first character rules out a call.
"""

from __future__ import annotations

from rollout.openai.tools.tool_parsers import PYTHON_TAG

HERMES_OPEN = "<tool_call>"


def content_end(parser: str, text: str, end: int) -> int:
    """The length of `text[:end]` (a prefix of the final text) that is a prefix of the final content."""
    if parser == "hermes":
        return _hermes_end(text, end)
    if parser == "llama3_json":
        return _llama3_end(text, end)
    return end


def _hermes_end(text: str, end: int) -> int:
    if end == 0 or text[0].isspace():  # stripped if a call follows, kept if none does: undecided
        return 0
    cut = text.find(HERMES_OPEN, 0, end)
    if cut == -1:
        cut = end - _partial_open(text, end)
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    return cut


def _partial_open(text: str, end: int) -> int:
    """The length of the longest suffix of `text[:end]` that `<tool_call>` starts with."""
    for size in range(min(len(HERMES_OPEN) - 1, end), 0, -1):
        if text.startswith(HERMES_OPEN[:size], end - size):
            return size
    return 0


def _llama3_end(text: str, end: int) -> int:
    head = text[:end].lstrip()[: len(PYTHON_TAG)]
    if not head or head.startswith("{") or PYTHON_TAG.startswith(head):
        return 0  # may still be a call (its text is no content then): it all goes out at the end
    return end
