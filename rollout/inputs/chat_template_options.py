"""How `LLM.chat` renders a conversation, with vLLM's options and meanings.

`chat_template` replaces the tokenizer's template; `add_generation_prompt` (default True) appends the
assistant's opening; `continue_final_message` leaves the last message open so the model continues it;
`chat_template_kwargs` reach the template as variables (e.g. `enable_thinking`). As in vLLM, the explicit
arguments win over the same names in `chat_template_kwargs`, and the conflicting combinations are refused
with vLLM's messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# vLLM's resolve_chat_template_kwargs refuses these two inside chat_template_kwargs.
_RESERVED = ("chat_template", "tokenize")


@dataclass(frozen=True)
class ChatTemplateOptions:
    chat_template: str | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("add_generation_prompt", "continue_final_message"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.chat_template is not None and not isinstance(self.chat_template, str):
            raise ValueError(
                f"chat_template must be a template string, got {type(self.chat_template).__name__}"
            )
        kwargs = {} if self.chat_template_kwargs is None else self.chat_template_kwargs
        if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
            raise ValueError("chat_template_kwargs must be a dict with string keys")
        object.__setattr__(self, "chat_template_kwargs", dict(kwargs))
        if self.continue_final_message and self.add_generation_prompt:
            raise ValueError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        reserved = sorted(set(_RESERVED) & set(kwargs))
        if reserved:
            raise ValueError(f"Found unexpected chat template kwargs from request: {set(reserved)}")

    def tools(self, tools: Any) -> Any:
        """`LLM.chat`'s `tools`, or when None the `tools` of chat_template_kwargs (vLLM's merge)."""
        return tools if tools is not None else self.chat_template_kwargs.get("tools")

    def template_kwargs(self) -> dict[str, Any]:
        """What `apply_chat_template` takes besides the messages and tools (explicit arguments win)."""
        kwargs = dict(self.chat_template_kwargs)
        kwargs.pop("tools", None)  # passed on its own (`tools` above)
        kwargs["add_generation_prompt"] = self.add_generation_prompt
        kwargs["continue_final_message"] = self.continue_final_message
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        return kwargs
