"""A token's true UTF-8 bytes for OpenAI's logprob entries (`bytes`), even when it holds part of a character.

OpenAI's `bytes` exist so that tokens splitting a character can be joined back into it. A token's own text
is then U+FFFD (the tokenizer decodes a partial UTF-8 sequence to the replacement character), whose bytes
(EF BF BD) would lose the character: vLLM sends those (`token.encode("utf-8", errors="replace")` in
vllm/entrypoints/openai/serving_chat.py). rollout reads the bytes the token stands for instead: a byte-level
BPE token (GPT-2, Llama 3, Qwen: the ByteLevel decoder) maps each of its characters back to one byte; a
SentencePiece byte-fallback token `<0xNN>` is byte NN. A token whose text has no U+FFFD keeps its text's
bytes, as before; one whose bytes cannot be read (another tokenizer) too.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(tokenizer: Any, token_id: int | None, text: str) -> list[int]:
    """The bytes of token `token_id`, whose decoded text is `text`."""
    if "\ufffd" not in text or token_id is None:
        return list(text.encode())
    raw = tokenizer.convert_ids_to_tokens(token_id)
    found = _raw_bytes(tokenizer, raw, token_id) if isinstance(raw, str) else None
    return list(found) if found is not None else list(text.encode())


def _raw_bytes(tokenizer: Any, raw: str, token_id: int) -> bytes | None:
    fallback = _BYTE_FALLBACK.fullmatch(raw)
    if fallback is not None:
        return bytes([int(fallback.group(1), 16)])
    if token_id in getattr(tokenizer, "added_tokens_decoder", {}) or not _byte_level(tokenizer):
        return None
    table = _UNICODE_TO_BYTE
    return bytes(table[c] for c in raw) if all(c in table for c in raw) else None


def _byte_level(tokenizer: Any) -> bool:
    """Whether the fast tokenizer decodes with ByteLevel (alone or inside a Sequence)."""
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if decoder is None:
        return False
    spec = json.loads(decoder.__getstate__())
    parts = spec.get("decoders") or [spec]
    return any(part.get("type") == "ByteLevel" for part in parts)


def _unicode_to_byte() -> dict[str, int]:
    """The inverse of byte-level BPE's byte -> character table (GPT-2's): printable Latin-1 bytes stand for
    themselves, the others for the characters from U+0100 on, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {chr(b): b for b in printable}
    shifted = sorted(set(range(256)) - set(printable))
    table.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return table


_UNICODE_TO_BYTE = _unicode_to_byte()
