"""Tokenizers for the text tests, built in memory: one whose tokens span several characters (so a
stop string can end inside a token) sized for the tiny model, and a byte-level BPE (multi-byte
characters split across tokens)."""

from __future__ import annotations

from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tests.builders import VOCAB
from tests.builders import char_tokenizer as base_char_tokenizer

LETTERS = "abcdefghij"
PIECES = ["<pad>", "<s>", "</s>", *LETTERS, " ", "<", ">", "/", *(a + b for a in LETTERS for b in LETTERS)]
PIECES += ["</answer>", "answer", "<think>", "</think>", "tool", "</tool_call>", "ok", "no", "yes", "x", "y"]


def piece_tokenizer() -> PreTrainedTokenizerFast:
    """Every id of the tiny model's vocabulary is a piece: letters, pairs of letters, a few tags."""
    assert len(PIECES) == VOCAB
    backend = Tokenizer(models.WordLevel({p: i for i, p in enumerate(PIECES)}, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character (tests.builders.char_tokenizer's vocabulary), decoded by joining them."""
    tokenizer = base_char_tokenizer()
    tokenizer.backend_tokenizer.decoder = decoders.Fuse()
    return tokenizer


def ids(*pieces: str) -> list[int]:
    return [PIECES.index(p) for p in pieces]


CORPUS = ["héllo wörld 👋 naïve café", "stop here </answer> then more", "ünïcödé 🙂 ok", "plain ascii text"]


def byte_bpe() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=["<s>", "</s>"]
    )
    backend.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>")


class WithoutBackend:
    """A tokenizer's Python surface without its Rust backend: what takes vLLM's slow path."""

    def __init__(self, tokenizer: Any) -> None:
        self._inner = tokenizer
        self.all_special_tokens = tokenizer.all_special_tokens

    def convert_ids_to_tokens(self, ids: list[int], skip_special_tokens: bool = False) -> list[str]:
        return self._inner.convert_ids_to_tokens(ids, skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self._inner.convert_tokens_to_string(tokens)

    def get_added_vocab(self) -> dict[str, int]:
        return self._inner.get_added_vocab()
