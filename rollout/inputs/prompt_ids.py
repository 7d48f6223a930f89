"""`LLM.generate`'s parsed prompts (prompt_inputs.py) to token ids and texts: rollout's tokenizing, or vLLM's
under `tokenization_kwargs` (tokenization_kwargs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollout.inputs.prompt_inputs import PromptInput
from rollout.inputs.tokenization_kwargs import TokenizationOptions, encode_prompt
from rollout.protocol.prompts import detokenize, tokenize_text


def prompt_ids(
    tokenizer: Any,
    inputs: list[PromptInput],
    options: TokenizationOptions | None,
    max_chars: Callable[[], int],
) -> list[list[int]]:
    """Each prompt's ids; `max_chars()`: the longest text that can fit (asked only when there is text)."""
    out = []
    for i, prompt in enumerate(inputs):
        field = f"prompts[{i}]"
        if prompt.token_ids is None and tokenizer is None:
            raise ValueError(f"{field} is text but the model has no tokenizer; pass token ids")
        chars = max_chars() if prompt.token_ids is None else None
        if options is not None:
            out.append(encode_prompt(tokenizer, prompt.text, prompt.token_ids, options, chars, field))
        elif prompt.token_ids is not None:
            out.append(prompt.token_ids)
        else:
            out.append(tokenize_text(tokenizer, prompt.text, chars, field))
    return out


def prompt_texts(
    tokenizer: Any, inputs: list[PromptInput], options: TokenizationOptions | None
) -> list[str | None]:
    """Each prompt's text; with vLLM's `needs_detokenization`, a token prompt's ids decoded (as given, before
    any truncation, as vLLM's renderer does)."""
    if options is None or not options.needs_detokenization:
        return [p.text for p in inputs]
    if tokenizer is None:
        raise ValueError("tokenization_kwargs.needs_detokenization: the model has no tokenizer")
    return [p.text if p.text is not None else detokenize(tokenizer, p.token_ids, False) for p in inputs]
