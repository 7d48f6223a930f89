"""`Logprob.decoded_token` for the offline `LLM`: each token of a logprobs entry decoded on its own, as vLLM's
`convert_ids_list_to_tokens` does (`tokenizer.decode([id])`, special tokens spelled out, with the leading
space a SentencePiece "▁" stands for put back, which decode drops for a lone token).

Filled when the request detokenizes and the model has a tokenizer (vLLM leaves it None with detokenize=False);
the server leaves it to clients, which have no tokenizer: None there. vLLM also repairs a byte-fallback
token that decodes to U+FFFD from the sampled tokens before it; rollout leaves U+FFFD.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.logprobs import Logprob
from rollout.outputs import CompletionOutput, RequestOutput
from rollout.sampling_params import SamplingParams


def with_decoded_tokens(
    outputs: list[RequestOutput], params: Sequence[SamplingParams], tokenizer: Any
) -> list[RequestOutput]:
    """`outputs` (one per params) with every Logprob's decoded_token filled where its request detokenizes."""
    if tokenizer is None:
        return outputs
    texts = _TokenTexts(tokenizer)
    for output, p in zip(outputs, params, strict=True):
        if not p.detokenize:
            continue
        if output.prompt_logprobs is not None:
            output.prompt_logprobs = [
                texts.entry(e) if e is not None else None for e in output.prompt_logprobs
            ]
        for sample in output.outputs:
            _decode_sample(sample, texts)
    return outputs


def _decode_sample(sample: CompletionOutput, texts: _TokenTexts) -> None:
    if sample.token_logprobs is not None:
        pairs = zip(sample.token_ids, sample.token_logprobs, strict=True)
        sample.token_logprobs = [texts.one(t, lp) for t, lp in pairs]
    if sample.top_logprobs is not None:
        sample.top_logprobs = [texts.entry(e) for e in sample.top_logprobs]


class _TokenTexts:
    """Each id's text, decoded once per call."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.marker = _leading_space_marker(tokenizer)
        self.cache: dict[int, str] = {}

    def text(self, token_id: int) -> str:
        if token_id not in self.cache:
            with TOKENIZER_LOCK:
                decoded = self.tokenizer.decode([token_id]) or ""
                raw = self.tokenizer.convert_ids_to_tokens(token_id) if self.marker else None
            self.cache[token_id] = _restore_leading_spaces(raw or "", decoded, self.marker)
        return self.cache[token_id]

    def one(self, token_id: int, value: float) -> float:
        if not isinstance(value, Logprob):
            return value
        return value.with_decoded_token(self.text(token_id))

    def entry(self, entry: dict[int, float]) -> dict[int, float]:
        return {token: self.one(token, value) for token, value in entry.items()}


def _leading_space_marker(tokenizer: Any) -> str | None:
    """The Metaspace replacement ("▁") of a SentencePiece-style fast tokenizer, else None (vLLM's rule)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    pre = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    for part in [pre, *(pre.get("pretokenizers") or [])]:
        if part.get("type") == "Metaspace":
            return part.get("replacement", "▁")
    return None


def _restore_leading_spaces(raw: str, text: str, marker: str | None) -> str:
    if not marker:
        return text
    markers = len(raw) - len(raw.lstrip(marker))
    missing = markers - (len(text) - len(text.lstrip(" ")))
    return " " * missing + text if missing > 0 else text
