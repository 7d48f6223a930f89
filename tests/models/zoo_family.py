"""The zoo's common parts: the base config every tiny family starts from, and the Family entry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformers import PretrainedConfig, PreTrainedModel

VOCAB = 128
_BASE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


@dataclass(frozen=True)
class Family:
    model_type: str
    make_config: Callable[[], PretrainedConfig]
    note: str = ""  # supported: what it exercises; refused: the words the refusal must contain
    tune: Callable[[PreTrainedModel], None] | None = None  # on the random weights, after build's scaling


def _cfg(cls: type, **overrides: object) -> Callable[[], PretrainedConfig]:
    return lambda: cls(**{**_BASE, **overrides})
