"""SamplerReplay under structured outputs: the grammar's state is replayed over the sampled tokens (a fresh
matcher walked token by token), so each token's replayed processed logprob is the sampler's bit for bit,
alone and with the bans and the filters; a completion that leaves the grammar is refused naming the token."""

from __future__ import annotations

import pytest
import torch

from rollout import SamplingParams
from rollout.replay import SamplerReplay
from rollout.structured_outputs import StructuredOutputsParams
from rollout.structured_outputs.grammar_compiler import GrammarCompiler
from tests.replay.replay_builders import EOS, draw
from tests.structured.builders import SCHEMA, json_tokenizer

pytest.importorskip("xgrammar")

VOCAB = 128  # the tiny models' vocabulary, wider than the JSON tokenizer's
SPECS = {
    "regex": StructuredOutputsParams(regex="(yes|no)-[0-9]{2,4}"),
    "json": StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True),
    "choice": StructuredOutputsParams(choice=["alpha", "beta", "gamma delta"]),
}


def token(char: str) -> int:
    return json_tokenizer().convert_tokens_to_ids(char)


def draw_with_grammar(params: SamplingParams, seed: int):
    compiled = GrammarCompiler(json_tokenizer(), VOCAB, {EOS}).compile(params.structured_outputs)
    return draw(params, steps=60, seed=seed, grammar=compiled, vocab=VOCAB, prompt=[token("a"), token("b")])


@pytest.mark.parametrize("kind", SPECS)
@pytest.mark.parametrize(
    "settings",
    [
        {},
        dict(temperature=0.7, top_k=6, top_p=0.9),
        dict(min_tokens=3, bad_words_token_ids=[[token("1")], [token("9"), token("9")]]),
    ],
    ids=["alone", "filters", "bans"],
)
def test_replayed_logprobs_under_a_grammar_equal_the_samplers(kind: str, settings: dict) -> None:
    params = SamplingParams(max_tokens=60, structured_outputs=SPECS[kind], **settings)
    replay = SamplerReplay(VOCAB, [EOS], json_tokenizer())
    for seed in range(2):
        sample = draw_with_grammar(params, seed)
        got = replay.logprobs(sample.logits, sample.prompt, sample.completion, params)
        assert torch.equal(got, torch.tensor(sample.logprobs)), (kind, settings, seed)
        without = replay.logprobs(
            sample.logits, sample.prompt, sample.completion, SamplingParams(max_tokens=60, **settings)
        )
        assert not torch.equal(without, got)  # the mask is what makes them equal


def test_a_completion_that_leaves_the_grammar_is_refused_naming_the_token() -> None:
    params = SamplingParams(max_tokens=60, structured_outputs=SPECS["regex"])
    sample = draw_with_grammar(params, 0)
    completion = [token("x"), *sample.completion[1:]]
    with pytest.raises(ValueError, match="completion token 0 .* does not follow the grammar"):
        SamplerReplay(VOCAB, [EOS], json_tokenizer()).logprobs(
            sample.logits, sample.prompt, completion, params
        )


def test_a_grammar_needs_the_tokenizer() -> None:
    params = SamplingParams(structured_outputs=SPECS["regex"])
    with pytest.raises(ValueError, match="structured_outputs"):
        SamplerReplay(VOCAB, [EOS]).prepare(params)
