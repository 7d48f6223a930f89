"""vLLM's `chat_template_content_format` for `LLM.chat`: how each message's `content` reaches the template.

"string": the text parts joined with "\\n" into one string (None content: ""); "openai": a list of parts,
a string content wrapped as [{"type": "text", "text": ...}], text-like parts ("text", "input_text",
"output_text", "refusal", "thinking") as {"type": "text", "text": ...}, image placeholders as
{"type": "image"}; "auto": "openai" when the template loops over a message's content, else "string"
(the template's Jinja syntax tree, as vLLM reads it). Followed: vllm/entrypoints/chat_utils.py
(_parse_chat_message_content, _parse_chat_message_content_part) and vllm/renderers/hf.py
(_detect_content_format). Only `content` changes; the other keys pass as given (rollout's rule). Without
the option (None) messages go to the template as given, as the server renders them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jinja2
import jinja2.nodes as nodes
from transformers.utils.chat_template_utils import _compile_jinja_template

FORMATS = ("auto", "string", "openai")
# vLLM's text-like part types, each with the key that holds its text.
_TEXT_KEYS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
}


def resolve_content_format(value: str | None, template: str | None) -> str | None:
    """ "string" | "openai" | None (as given); ValueError names chat_template_content_format."""
    if value is None:
        return None
    if value not in FORMATS:
        raise ValueError(f"chat_template_content_format must be one of {', '.join(FORMATS)}, got {value!r}")
    if value != "auto":
        return value
    return detect_content_format(template) if template else "string"


def with_content_format(messages: list[dict[str, Any]], fmt: str | None, field: str) -> list[dict[str, Any]]:
    if fmt is None:
        return messages
    return [_message(m, fmt, f"{field}[{i}].content") for i, m in enumerate(messages)]


def detect_content_format(template: str) -> str:
    """vLLM's rule: "openai" if a `for` loop iterates over `<message>.content` (or `['content']`, filtered
    or sliced), where <message> is a loop variable over `messages` or a name assigned from it."""
    try:
        ast = _compile_jinja_template(template).environment.parse(template)
    except jinja2.TemplateError:
        return "string"  # vLLM falls back to its default
    message_names = set(_loop_targets(ast, _assigned_from(ast, "messages"), None))
    return "openai" if any(True for _ in _loop_targets(ast, message_names, "content")) else "string"


def _message(message: dict[str, Any], fmt: str, field: str) -> dict[str, Any]:
    content = message.get("content")
    parts = (
        []
        if content is None
        else [{"type": "text", "text": content}]
        if isinstance(content, str)
        else content
    )
    converted = [
        p for p in (_part(part, fmt, f"{field}[{i}]") for i, part in enumerate(parts)) if p is not None
    ]
    return {**message, "content": converted if fmt == "openai" else "\n".join(converted)}


def _part(part: dict[str, Any], fmt: str, field: str) -> Any:
    """A part as vLLM's _parse_chat_message_content_part gives it (message_checks.py already refused
    parts that are not objects with a type, which vLLM reads too)."""
    kind = part.get("type")
    if kind in _TEXT_KEYS:
        text = part.get(_TEXT_KEYS[kind])
        if text is None:
            return None  # vLLM skips a text part without text
        return {"type": "text", "text": text} if fmt == "openai" else text
    if kind == "image" and fmt == "openai":
        return {"type": "image"}
    raise ValueError(
        f"{field}: a {kind!r} part under chat_template_content_format={fmt!r} is not supported"
        + (" (images need 'openai': their placeholders are parts)" if kind == "image" else "")
    )


def _assigned_from(ast: nodes.Template, root: str) -> set[str]:
    """`root` and every name assigned from it (or from such a name), as vLLM's breadth-first search."""
    names, todo = {root}, [root]
    while todo:
        source = todo.pop()
        for assign in ast.find_all(nodes.Assign):
            target = assign.target
            if (
                isinstance(target, nodes.Name)
                and target.name not in names
                and _reads(assign.node, source, None)
            ):
                names.add(target.name)
                todo.append(target.name)
    return names


def _loop_targets(ast: nodes.Template, names: set[str], key: str | None) -> Iterator[str]:
    for loop in ast.find_all(nodes.For):
        if isinstance(loop.target, nodes.Name) and any(_reads(loop.iter, name, key) for name in names):
            yield loop.target.name


def _reads(node: nodes.Node, name: str, key: str | None) -> bool:
    """`node` is `name` (key None) or `name.key` / `name[key]`, possibly under a filter, a test or a slice."""
    if isinstance(node, (nodes.Filter, nodes.Test)):
        return node.node is not None and _reads(node.node, name, key)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _reads(node.node, name, key)
    if key is None:
        return isinstance(node, nodes.Name) and node.ctx == "load" and node.name == name
    if isinstance(node, nodes.Getitem):
        return _reads(node.node, name, None) and isinstance(node.arg, nodes.Const) and node.arg.value == key
    return isinstance(node, nodes.Getattr) and _reads(node.node, name, None) and node.attr == key
