"""A character tokenizer that can write JSON, and a tiny LLM that uses it."""

from __future__ import annotations

import json

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rollout import LLM, EngineConfig
from tests.builders import tiny_model

JSON_CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789{}[]":,. -'


def json_tokenizer() -> PreTrainedTokenizerFast:
    """ids 3.. are single characters (JSON_CHARS), inside the tiny model's 128-token vocabulary."""
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(JSON_CHARS)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()  # characters joined as they are
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")


def structured_llm(seed: int = 0, **config: object) -> LLM:
    config.setdefault("num_blocks", 256)
    return LLM(model=tiny_model("llama", seed), tokenizer=json_tokenizer(), config=EngineConfig(**config))


SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"enum": [1, 2, 3]},
        "tag": {"type": "string", "maxLength": 4},
    },
    "required": ["ok", "n", "tag"],
    "additionalProperties": False,
}


def follows_schema(text: str) -> bool:
    """SCHEMA's rules, checked by hand (no schema validator among the dependencies)."""
    value = json.loads(text)
    return (
        set(value) == {"ok", "n", "tag"}
        and isinstance(value["ok"], bool)
        and value["n"] in (1, 2, 3)
        and isinstance(value["tag"], str)
        and len(value["tag"]) <= 4
    )


def z_first_tokenizer() -> PreTrainedTokenizerFast:
    """Characters from id 0 ("z" is 0): a row sampled from nothing (all -inf, NaN after softmax, drawn
    as id 0) would write a real character the grammar may allow, so tests can see it."""
    chars = "zabcdefghijklmnopqrstuvwxy"
    vocab = {"z": 0, "<s>": 1, "</s>": 2, "<pad>": 3, **{c: i + 3 for i, c in enumerate(chars) if c != "z"}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")


def z_first_llm(seed: int = 0) -> LLM:
    return LLM(
        model=tiny_model("llama", seed), tokenizer=z_first_tokenizer(), config=EngineConfig(num_blocks=256)
    )
