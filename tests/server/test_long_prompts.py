"""Long text prompts are refused before tokenizing, and the engine's thread never runs the tokenizer."""

import threading

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rollout import SamplingParams
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.prompts import max_token_chars, text_char_limit
from tests.builders import char_tokenizer
from tests.server.server_builders import client_for, make_engine, serving

PARAMS = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)


def byte_level_bpe() -> PreTrainedTokenizerFast:
    """A byte-level BPE (GPT-2 style) trained on a little text, so it has multi-byte merges."""
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = ["the quick brown fox jumps over the lazy dog " * 20, "ünïcödé テキスト 数字 1234567890 " * 20]
    backend.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")


BPE = byte_level_bpe()


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_no_text_has_fewer_tokens_than_its_length_over_the_longest_token(text: str) -> None:
    """Soundness of the bound: a text over max_model_len x K characters has over max_model_len tokens."""
    num_tokens = len(BPE(text)["input_ids"])
    assert num_tokens * max_token_chars(BPE) >= len(text)


def test_the_bound_counts_special_tokens() -> None:
    assert max_token_chars(BPE) >= len("<|endoftext|>")


class CallRecorder:
    """Records the thread of every call to the tokenizer class's encode and decode entry points."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
        self.threads: list[str] = []
        self.encoded: list[int] = []
        for name in ("__call__", "decode"):
            original = getattr(cls, name)
            monkeypatch.setattr(cls, name, self._wrap(original, name))

    def _wrap(self, original, name):
        def recorded(tokenizer, *args, **kwargs):
            self.threads.append(threading.current_thread().name)
            if name == "__call__":
                self.encoded.append(len(args[0]))
            return original(tokenizer, *args, **kwargs)

        return recorded


def test_a_text_longer_than_the_context_can_hold_is_refused_without_tokenizing(monkeypatch) -> None:
    tokenizer = char_tokenizer(chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    engine = make_engine(tokenizer=tokenizer)
    limit = text_char_limit(tokenizer, engine.max_model_len)
    recorder = CallRecorder(monkeypatch, type(tokenizer))
    with serving(engine) as server, client_for(server) as client:
        stub = pb_grpc.RolloutServiceStub(client.channels[server.address])
        request = pb.GenerateBatchRequest(prompts=[pb.Prompt(text="a" * 8 * 2**20)])
        with pytest.raises(grpc.RpcError) as info:
            stub.GenerateBatch(request, timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "prompts[0]: text: 8388608 characters" in info.value.details()
        assert recorder.encoded == []
        chat = [{"role": "user", "content": "b" * (limit + 1)}]
        with pytest.raises(grpc.RpcError) as info:
            client.generate([chat], PARAMS)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "messages:" in info.value.details()
        assert recorder.encoded == []
        with pytest.raises(grpc.RpcError) as info:  # at the limit it is tokenized, then refused by count
            client.generate(["a" * limit], PARAMS)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "tokens" in info.value.details()
        assert recorder.encoded == [limit]


def test_the_engine_loop_thread_never_runs_the_tokenizer(monkeypatch) -> None:
    tokenizer = char_tokenizer()
    recorder = CallRecorder(monkeypatch, type(tokenizer))
    with serving(make_engine(tokenizer=tokenizer)) as server, client_for(server) as client:
        outs = client.generate(
            ["abc de", "xyz"], SamplingParams(n=2, temperature=0, max_tokens=6, ignore_eos=True)
        )
    assert recorder.threads and "rollout-engine-loop" not in recorder.threads
    for out in outs:
        prompt_text = tokenizer.decode(out.prompt_token_ids, skip_special_tokens=True)
        for sample in out.outputs:  # decoded after the prompt, as vLLM's incremental text is
            whole = tokenizer.decode(out.prompt_token_ids + sample.token_ids, skip_special_tokens=True)
            assert sample.text == whole[len(prompt_text) :]
