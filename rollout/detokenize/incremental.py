"""IncrementalDetokenizer: one sample's text as its tokens arrive, decoded with the prompt as context.

vLLM's two paths: a tokenizer with a Rust backend goes through `tokenizers.decoders.DecodeStream`
primed with the prompt's last tokens (so a first token's leading space survives, as it does in
vLLM's output); any other through vLLM's prefix/read-offset window over
`convert_ids_to_tokens`. A token that ends inside a multi-byte character yields "" until the
character completes. Callers hold `TOKENIZER_LOCK` around `step` (tokenizer_lock.py).
"""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

PROMPT_CONTEXT = (
    4,
    24,
)  # vLLM primes the stream with the shortest prompt suffix in this range that decodes cleanly
WINDOW_OFFSET = 5  # vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET (the slow path's look-back)
_INVALID_PREFIX = "Invalid prefix encountered"


class IncrementalDetokenizer:
    """`step(token_id)` returns the text that token adds (possibly "")."""

    def __init__(
        self,
        tokenizer: Any,
        prompt_ids: list[int],
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        backend = getattr(tokenizer, "_tokenizer", None)
        self.skip_special_tokens = skip_special_tokens
        if isinstance(backend, Tokenizer):
            self._path: _StreamPath | _WindowPath = _StreamPath(
                backend, prompt_ids, skip_special_tokens, spaces_between_special_tokens
            )
        else:
            self._path = _WindowPath(
                tokenizer, prompt_ids, skip_special_tokens, spaces_between_special_tokens
            )

    def step(self, token_id: int) -> str:
        return self._path.step(token_id)


class _StreamPath:
    """vLLM's FastIncrementalDetokenizer: DecodeStream, plus its rule for adjacent added tokens."""

    def __init__(self, backend: Tokenizer, prompt_ids: list[int], skip: bool, spaces: bool) -> None:
        self.backend, self.skip = backend, skip
        self.stream = DecodeStream(skip_special_tokens=skip)
        for token_id in _clean_suffix(backend, prompt_ids):
            self.stream.step(backend, token_id)
        # Without spaces between special tokens, two added tokens in a row are written as their raw content.
        self.added: dict[int, str] = {}
        if not (skip or spaces):
            self.added = {i: t.content for i, t in backend.get_added_tokens_decoder().items()}
        self.last_added = False

    def step(self, token_id: int) -> str:
        try:
            text = self.stream.step(self.backend, token_id)
        except Exception as exc:  # vLLM's recovery: a non-monotonic UTF-8 prefix breaks the stream's state
            if not str(exc).startswith(_INVALID_PREFIX):
                raise
            self.stream = DecodeStream(skip_special_tokens=self.skip)
            text = self.stream.step(self.backend, token_id)
        if self.added:
            content = self.added.get(token_id)
            if content is not None and self.last_added:
                text = content
            self.last_added = content is not None
        return text or ""


def _clean_suffix(backend: Tokenizer, prompt_ids: list[int]) -> list[int]:
    shortest, longest = PROMPT_CONTEXT
    if len(prompt_ids) <= shortest:
        return list(prompt_ids)
    for size in range(shortest, min(len(prompt_ids) + 1, longest)):
        suffix = list(prompt_ids[-size:])
        if "\ufffd" not in backend.decode(suffix):
            return suffix
    return list(prompt_ids)


class _WindowPath:
    """vLLM's SlowIncrementalDetokenizer (detokenize_incrementally): a token's text is what decoding
    the window [prefix_offset:] adds to decoding [prefix_offset:read_offset], once it is whole."""

    def __init__(self, tokenizer: Any, prompt_ids: list[int], skip: bool, spaces: bool) -> None:
        self.tokenizer, self.skip, self.spaces = tokenizer, skip, spaces
        tail = prompt_ids[-WINDOW_OFFSET - 2 :]
        self.tokens = [t or "" for t in tokenizer.convert_ids_to_tokens(tail, skip_special_tokens=skip)]
        self.read_offset = len(self.tokens)
        self.prefix_offset = max(self.read_offset - WINDOW_OFFSET, 0)
        self.added_vocab = tokenizer.get_added_vocab()
        self.special = set(tokenizer.all_special_tokens)

    def step(self, token_id: int) -> str:
        new = self.tokenizer.convert_ids_to_tokens([token_id], skip_special_tokens=self.skip)
        self.tokens.extend(t or "" for t in ([new] if isinstance(new, str) else new))
        prefix_text = self._to_string(self.tokens[self.prefix_offset : self.read_offset])
        new_text = self._to_string(self.tokens[self.prefix_offset :])
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        return new_text[len(prefix_text) :]

    def _to_string(self, tokens: list[str]) -> str:
        if not self.added_vocab:
            return self.tokenizer.convert_tokens_to_string(tokens)
        parts, run = [], []  # added tokens are written as they are, between decoded runs
        for token in tokens:
            if self.skip and token in self.special:
                continue
            if token in self.added_vocab:
                if run:
                    parts.append(self.tokenizer.convert_tokens_to_string(run))
                    run = []
                parts.append(token)
            else:
                run.append(token)
        if run:
            parts.append(self.tokenizer.convert_tokens_to_string(run))
        return (" " if self.spaces else "").join(parts)
