"""`Logprob` is vLLM's object (.logprob, .rank, .decoded_token) and the float it holds: RL code's float use
(torch.tensor, sums, JSON, pickling) keeps working; the offline LLM fills decoded_token as vLLM does."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.logprobs import Logprob
from tests.builders import tiny_model, tool_chat_tokenizer


def test_a_logprob_is_the_float_it_holds_with_vllms_attributes() -> None:
    values = [Logprob(-0.5, 1, "a"), Logprob(-1.25, 7)]
    assert values[0].logprob == -0.5 and values[0].rank == 1 and values[0].decoded_token == "a"
    assert values[1].decoded_token is None
    assert torch.tensor(values).tolist() == [-0.5, -1.25] and sum(values) == -1.75
    assert json.dumps(values) == "[-0.5, -1.25]"
    again = pickle.loads(pickle.dumps(values))
    assert [(v.logprob, v.rank, v.decoded_token) for v in again] == [(-0.5, 1, "a"), (-1.25, 7, None)]
    assert repr(values[1]) == "Logprob(logprob=-1.25, rank=7, decoded_token=None)"


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(model=tiny_model(seed=2), tokenizer=tool_chat_tokenizer(), config=EngineConfig(num_blocks=64))


def test_offline_logprobs_carry_each_tokens_own_text_as_vllm_decodes_it(llm: LLM) -> None:
    tokenizer = tool_chat_tokenizer()
    params = SamplingParams(max_tokens=4, seed=1, logprobs=2, prompt_logprobs=1)
    (out,) = llm.generate(["hello"], params)
    sample = out.outputs[0]
    for token, value, top in zip(sample.token_ids, sample.token_logprobs, sample.top_logprobs, strict=True):
        assert value.decoded_token == tokenizer.decode([token])
        assert all(v.decoded_token == tokenizer.decode([t]) for t, v in top.items())
    for entry in out.prompt_logprobs[1:]:
        assert all(v.decoded_token == tokenizer.decode([t]) and v.rank >= 1 for t, v in entry.items())
    (plain,) = llm.generate(["hello"], SamplingParams(max_tokens=4, seed=1, logprobs=2, detokenize=False))
    assert all(
        v.decoded_token is None for v in plain.outputs[0].token_logprobs
    )  # vLLM: none with detokenize=False
    assert plain.outputs[0].token_logprobs == sample.token_logprobs  # the same values, ranks too
    assert [v.rank for v in plain.outputs[0].token_logprobs] == [v.rank for v in sample.token_logprobs]
