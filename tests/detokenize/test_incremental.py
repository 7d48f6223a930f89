"""IncrementalDetokenizer: the text it builds token by token is the decoded text, on both of vLLM's paths."""

from __future__ import annotations

import pytest

from rollout.detokenize.incremental import IncrementalDetokenizer
from tests.detokenize.tokenizer_builders import CORPUS, WithoutBackend, byte_bpe


def incremental(tokenizer, prompt: list[int], output: list[int]) -> list[str]:
    detokenizer = IncrementalDetokenizer(tokenizer, prompt)
    return [detokenizer.step(t) for t in output]


@pytest.mark.parametrize("text", CORPUS)
@pytest.mark.parametrize("slow", [False, True], ids=["stream", "window"])
def test_the_pieces_add_up_to_the_decoded_completion(text: str, slow: bool) -> None:
    bpe = byte_bpe()
    prompt, output = bpe("say: ")["input_ids"], bpe(text)["input_ids"]
    pieces = incremental(WithoutBackend(bpe) if slow else bpe, prompt, output)
    assert "".join(pieces) == bpe.decode(prompt + output)[len(bpe.decode(prompt)) :] == text


def test_a_character_split_across_tokens_appears_once_whole() -> None:
    bpe = byte_bpe()
    output = bpe("👋")["input_ids"]
    assert len(output) > 1  # byte-level: the emoji's four bytes are several tokens
    assert incremental(bpe, bpe("hi ")["input_ids"], output) == [""] * (len(output) - 1) + ["👋"]
