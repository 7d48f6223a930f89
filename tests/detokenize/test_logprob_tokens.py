"""`Logprob.decoded_token` follows vLLM's convert_ids_list_to_tokens: each id decoded alone, with the leading
spaces a SentencePiece "▁" stands for put back (decode drops them for a lone token)."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rollout.detokenize.logprob_tokens import _TokenTexts


def metaspace_tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel({"<unk>": 0, "▁hello": 1, "world": 2, "▁▁x": 3}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")


def test_a_sentencepiece_tokens_leading_spaces_are_restored_as_vllm_does() -> None:
    tokenizer = metaspace_tokenizer()
    assert [tokenizer.decode([i]) for i in (1, 2, 3)] == ["hello", "world", "x"]  # decode drops them
    texts = _TokenTexts(tokenizer)
    assert [texts.text(i) for i in (1, 2, 3)] == [" hello", "world", "  x"]
