"""OpenAI logprob entries' `bytes` are the token's true UTF-8 bytes, also for a token holding part of a
character (its text is U+FFFD): byte-level BPE and SentencePiece byte-fallback tokens, in `logprobs.content`
and `top_logprobs`, through the official client against a real server. Oracle: the tokens of a text, their
bytes joined, are the text's UTF-8 (what OpenAI's `bytes` are for)."""

from __future__ import annotations

import openai
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from rollout.openai.replies.response_objects import ReplyOptions, chat_logprobs
from tests.openai.openai_builders import openai_serving
from tests.server.server_builders import make_engine

TEXT = "é€"  # two and three bytes: every token of it is a partial character
REPLACEMENT = list("\ufffd".encode())


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE (GPT-2's alphabet) over printable ASCII, space, newline and the bytes of TEXT."""
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    chars = (
        [chr(c) for c in range(ord("!"), ord("~") + 1)] + ["Ġ", "Ċ"] + list(pre.pre_tokenize_str(TEXT)[0][0])
    )
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{c: i + 3 for i, c in enumerate(dict.fromkeys(chars))}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer, backend.decoder = pre, decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    return tokenizer


def byte_fallback_tokenizer() -> PreTrainedTokenizerFast:
    """SentencePiece-style BPE with byte fallback: characters outside the vocabulary become <0xNN> tokens."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "a": 4}
    vocab |= {f"<0x{b:02X}>": i + 5 for i, b in enumerate(TEXT.encode())}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.mark.parametrize("build", [byte_level_tokenizer, byte_fallback_tokenizer])
def test_the_bytes_of_a_texts_partial_tokens_join_to_its_utf8(build) -> None:
    tokenizer = build()
    ids = [t for t in tokenizer(TEXT, add_special_tokens=False)["input_ids"] if tokenizer.decode([t])]
    assert len(ids) == len(TEXT.encode())  # one token per byte
    opts = ReplyOptions(tokenizer, logprobs=True, top_logprobs=1)
    entries = chat_logprobs(ids, [0.0] * len(ids), [{t: 0.0} for t in ids], opts)
    assert [e["token"] for e in entries] == ["\ufffd"] * len(ids)  # the texts cannot say which bytes
    assert bytes(b for e in entries for b in e["bytes"]) == TEXT.encode()
    assert [e["top_logprobs"][0]["bytes"] for e in entries] == [e["bytes"] for e in entries]


def test_a_whole_character_keeps_its_texts_bytes() -> None:
    tokenizer = byte_level_tokenizer()
    ids = tokenizer("Ab", add_special_tokens=False)["input_ids"]
    entries = chat_logprobs(ids, [0.0, 0.0], None, ReplyOptions(tokenizer, logprobs=True))
    assert [e["bytes"] for e in entries] == [[65], [98]]


def test_the_server_sends_a_partial_tokens_true_bytes_through_the_client() -> None:
    tokenizer = byte_level_tokenizer()
    first = tokenizer(TEXT, add_special_tokens=False)["input_ids"][0]  # "é"'s first byte, 0xC3
    with openai_serving(make_engine(tokenizer=tokenizer)) as (_, http):
        client = openai.OpenAI(base_url=http.base_url, api_key="none", max_retries=0)
        reply = client.chat.completions.create(
            model="LlamaForCausalLM",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            logprobs=True,
            top_logprobs=2,
            extra_body={"allowed_token_ids": [first], "ignore_eos": True},
        )
    content = reply.choices[0].logprobs.content
    assert [(e.token, e.bytes) for e in content] == [("\ufffd", [0xC3])] * 2
    assert [0xC3] in [top.bytes for top in content[0].top_logprobs]
    assert REPLACEMENT not in [e.bytes for e in content]
