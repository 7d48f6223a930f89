"""vLLM's prompt forms for `LLM.generate`: a string, a token-id list, or a TextPrompt / TokensPrompt dict.

`{"prompt": text}` is tokenized; `{"prompt_token_ids": ids}` is used as given, its optional `"prompt"` the
text the ids stand for (`RequestOutput.prompt`). vLLM's other keys are refused by name, never ignored:
each changes what vLLM computes (images, a cache salt, a cross-encoder's token types).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

# vLLM's multimodal keys (inputs/llm.py `_PromptOptions`): a prompt with `multi_modal_data` goes to
# rollout/multimodal/prompt_dicts.py before this module; the others are refused here, in one place.
MULTI_MODAL_KEYS = ("multi_modal_data", "mm_processor_kwargs", "media_io_kwargs", "multi_modal_uuids")
# vLLM keys rollout has no counterpart for, with why.
_UNSUPPORTED = {
    "cache_salt": "per-request prefix-cache salts are not supported (every request shares the cache)",
    "token_type_ids": "token type ids are for cross-encoder models; rollout serves causal LMs",
    "prompt_embeds": "embedding prompts are not supported; pass token ids or text",
    "prompt_is_token_ids": "embedding prompts are not supported; pass token ids or text",
    "prompt_token_offsets": "prompt_token_offsets is an output of vLLM's tokenizer, not an input",
    "encoder_prompt": "encoder-decoder prompts are not supported; rollout serves decoder-only models",
    "decoder_prompt": "encoder-decoder prompts are not supported; rollout serves decoder-only models",
}
_KNOWN = {"prompt", "prompt_token_ids"}
PromptType = str | list[int] | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PromptInput:
    """One prompt: its token ids when given (else `text` is tokenized), and its text when known."""

    token_ids: list[int] | None
    text: str | None


def parse_prompts(prompts: object) -> list[PromptInput]:
    """`prompts` (one prompt or a list of them, vLLM's forms) as PromptInputs; ValueError naming the bad one."""
    if isinstance(prompts, (str, Mapping)):
        prompts = [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise ValueError(
            "prompts must be a string, a TextPrompt/TokensPrompt dict, or a list of strings, token-id lists "
            f"or such dicts, got {type(prompts).__name__}"
        )
    if prompts and all(isinstance(p, int) for p in prompts):
        raise ValueError("prompts must be a list of prompts; wrap a single token-id prompt as [[...]]")
    return [parse_prompt(prompt, f"prompts[{i}]") for i, prompt in enumerate(prompts)]


def parse_prompt(prompt: object, field: str) -> PromptInput:
    if isinstance(prompt, str):
        return PromptInput(None, prompt)
    if isinstance(prompt, (list, tuple)):
        return PromptInput(list(prompt), None)
    if isinstance(prompt, Mapping):
        return _prompt_dict(prompt, field)
    raise ValueError(
        f"{field} must be a string, a list of token ids, or a dict with 'prompt' or 'prompt_token_ids' "
        f"(vLLM's TextPrompt / TokensPrompt), got {type(prompt).__name__}"
    )


def refuse_multi_modal(key: str, field: str) -> NoReturn:
    """The one place vLLM's multimodal options rollout lacks are refused (images: `multi_modal_data`)."""
    raise ValueError(
        f"{field}.{key}: not supported; images go in 'multi_modal_data' (docs/models.md), nothing else does"
    )


def check_lora_request(lora_request: object) -> None:
    """vLLM's `lora_request=None` (or one None per prompt) is accepted; an adapter per request is refused."""
    requests = lora_request if isinstance(lora_request, (list, tuple)) else [lora_request]
    if any(r is not None for r in requests):
        raise ValueError(
            "lora_request: per-request LoRA adapters are not supported; merge the adapter into the served "
            "weights with llm.update_weights(peft_model) (docs/weight_updates.md) and pass lora_request=None"
        )


def check_priority(priority: object, num_prompts: int) -> None:
    """vLLM's `priority` (one int per prompt, lower first) under its default "fcfs" policy: None or zeros.

    rollout schedules first come, first served (vLLM's "fcfs"; no "priority" policy), so a non-zero value
    is refused as vLLM refuses it without `scheduling_policy="priority"` (vLLM's LLMEngine.add_request:
    "Got priority ... but Priority scheduling is not enabled."), before anything is queued.
    """
    if priority is None:
        return
    if isinstance(priority, (str, bytes)) or not isinstance(priority, (list, tuple)):
        raise ValueError(
            f"priority must be a list of integers, one per prompt, got {type(priority).__name__}"
        )
    if len(priority) != num_prompts:
        raise ValueError(f"priority: {len(priority)} values for {num_prompts} prompts; give one per prompt")
    for i, value in enumerate(priority):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"priority[{i}] must be an integer, got {value!r}")
        if value != 0:
            raise ValueError(
                f"priority[{i}]: got priority {value} but priority scheduling is not enabled; rollout "
                "schedules first come, first served (vLLM's default 'fcfs' policy), so only 0 is accepted; "
                "nothing was generated"
            )


def _prompt_dict(prompt: Mapping[str, Any], field: str) -> PromptInput:
    for key in prompt:
        if key in MULTI_MODAL_KEYS:
            refuse_multi_modal(key, field)
        if key in _UNSUPPORTED:
            raise ValueError(f"{field}.{key}: {_UNSUPPORTED[key]}")
        if key not in _KNOWN:
            raise ValueError(
                f"{field}.{key}: unknown prompt key; a prompt dict takes 'prompt' (TextPrompt) or "
                "'prompt_token_ids' with an optional 'prompt' text (TokensPrompt)"
            )
    text = prompt.get("prompt")
    if text is not None and not isinstance(text, str):
        raise ValueError(f"{field}.prompt must be a string, got {type(text).__name__}")
    if "prompt_token_ids" in prompt:
        ids = prompt["prompt_token_ids"]
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise ValueError(
                f"{field}.prompt_token_ids must be a list of token ids, got {type(ids).__name__}"
            )
        return PromptInput(list(ids), text)
    if text is None:
        raise ValueError(f"{field}: a prompt dict needs 'prompt' (text) or 'prompt_token_ids'")
    return PromptInput(None, text)
