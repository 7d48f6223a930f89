"""`CompletionOutput.logprobs` is vLLM's shape, so vLLM code runs as written (`logprobs[i][token].logprob`,
`.rank`, `.decoded_token`, TRL's `next(iter(lp.values())).logprob`), offline and through the gRPC client;
`token_logprobs` holds the same values as floats for RL code. Oracle: a teacher-forced forward of the model."""

from __future__ import annotations

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from rollout.logprobs import Logprob, SampleLogprobs
from tests.builders import reference_copy, tiny_model, tool_chat_tokenizer
from tests.server.server_builders import client_for, make_engine, serving

PROMPT = [3, 17, 5, 9, 12]
PARAMS = SamplingParams(n=2, max_tokens=6, temperature=1.0, seed=4, logprobs=3, ignore_eos=True)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(model=tiny_model(seed=2), tokenizer=tool_chat_tokenizer(), config=EngineConfig(num_blocks=64))


def _teacher_forced(llm: LLM, completion: list[int]) -> torch.Tensor:
    """[len(completion), vocab] fp32 log-softmax of the logits that predicted each completion token."""
    with torch.no_grad():
        logits = reference_copy(llm.engine.model)(torch.tensor([PROMPT + completion])).logits[0].float()
    return torch.log_softmax(logits[len(PROMPT) - 1 : -1], dim=-1)


def test_vllm_code_reads_each_token_dict_as_vllm_builds_it(llm: LLM) -> None:
    tokenizer = tool_chat_tokenizer()
    for comp in llm.generate([PROMPT], PARAMS)[0].outputs:
        expected = _teacher_forced(llm, list(comp.token_ids))
        assert len(comp.logprobs) == len(comp.token_ids)
        for i, token in enumerate(comp.token_ids):
            entry = comp.logprobs[i]  # vLLM: dict[int, Logprob], the sampled token first, then the top k
            top3 = expected[i].topk(3).indices.tolist()
            assert list(entry)[0] == token and set(entry) == {token, *top3} and len(entry) in (3, 4)
            assert entry[token].logprob == pytest.approx(expected[i, token].item(), abs=1e-4)
            assert [entry[t].rank for t in top3] == [1, 2, 3]
            rank = top3.index(token) + 1 if token in top3 else int((expected[i] >= expected[i, token]).sum())
            assert entry[token].rank == rank  # vLLM's rule; a top-k entry keeps its top-k rank
            assert all(v.decoded_token == tokenizer.decode([t]) for t, v in entry.items())
        trl_style = [next(iter(lp.values())).logprob for lp in comp.logprobs]  # TRL's colocate extraction
        assert trl_style == list(comp.token_logprobs)
        assert torch.tensor(comp.token_logprobs).tolist() == pytest.approx(
            expected.gather(1, torch.tensor(comp.token_ids)[:, None])[:, 0].tolist(), abs=1e-4
        )


def test_logprobs_none_is_none_and_zero_is_the_sampled_token_alone(llm: LLM) -> None:
    none = llm.generate([PROMPT], SamplingParams(max_tokens=4, seed=1))[0].outputs[0]
    assert none.logprobs is None and none.token_logprobs is None
    zero = llm.generate([PROMPT], SamplingParams(max_tokens=4, seed=1, logprobs=0))[0].outputs[0]
    assert [list(entry) for entry in zero.logprobs] == [[t] for t in zero.token_ids]
    assert [entry[t] for entry, t in zip(zero.logprobs, zero.token_ids, strict=True)] == zero.token_logprobs


def test_the_grpc_client_returns_the_same_vllm_shape_as_offline() -> None:
    offline = LLM(model=tiny_model("llama", 0), num_blocks=256, max_num_seqs=64)
    want = offline.generate([PROMPT], PARAMS)[0].outputs
    with serving(make_engine()) as server, client_for(server) as client:
        got = client.generate([PROMPT], PARAMS)[0].outputs
    for g, w in zip(got, want, strict=True):
        assert g.token_ids == w.token_ids and len(g.logprobs) == len(w.logprobs)
        for ge, we in zip(g.logprobs, w.logprobs, strict=True):
            assert list(ge) == list(we)  # same tokens, same order
            assert [(v.logprob, v.rank) for v in ge.values()] == pytest.approx(
                [(v.logprob, v.rank) for v in we.values()], abs=1e-5
            )


def test_the_view_indexes_slices_and_compares_like_a_list() -> None:
    view = SampleLogprobs([5, 7], [Logprob(-0.5, 1), -1.0], [{5: Logprob(-0.5, 1), 6: -2.0}, {8: -0.1}])
    assert view[-1] == {7: -1.0, 8: -0.1} and list(view[-1]) == [7, 8] and view[0:1] == [view[0]]
    assert view == [{5: -0.5, 6: -2.0}, {7: -1.0, 8: -0.1}] and view[1][7].rank is None
    with pytest.raises(IndexError, match="logprobs index 2"):
        view[2]
    with pytest.raises(ValueError, match="1 values .* for 2 tokens"):
        SampleLogprobs([5, 7], [-0.5], None)
