"""The logprobs mode over a real loopback gRPC server: the server's default (`--logprobs-mode`, reported by
GetServerInfo) applies to requests that leave it unset, a request's own mode wins, and every sample states
its mode; the values and their vLLM ranks equal the offline engine's."""

from __future__ import annotations

import pytest

from rollout import LLM, SamplingParams
from rollout.logprobs import Logprob
from rollout.outputs import CompletionOutput, PartialSample
from rollout.protocol import convert
from tests.builders import random_prompts, tiny_model
from tests.server.server_builders import client_for, make_engine, serving

SETTINGS = dict(n=2, max_tokens=5, temperature=0.8, top_k=6, seed=2, logprobs=2, prompt_logprobs=1)


@pytest.mark.parametrize("request_mode", [None, "processed_logits", "raw_logprobs"])
def test_the_server_default_and_a_request_mode_reach_the_samples(request_mode: str | None) -> None:
    prompts = random_prompts(2, 4, 9, seed=3)
    params = SamplingParams(**SETTINGS, logprobs_mode=request_mode)
    mode = request_mode or "raw_logits"
    offline = LLM(model=tiny_model("llama", 0), num_blocks=256, max_num_seqs=64, logprobs_mode="raw_logits")
    expected = offline.generate(prompts, params)
    with serving(make_engine(logprobs_mode="raw_logits")) as server, client_for(server) as client:
        assert client.server_info().default_logprobs_mode == "raw_logits"
        got = client.generate(prompts, params)
    for g, e in zip(got, expected, strict=True):
        assert g.logprobs_mode == mode and g.prompt_logprobs == pytest.approx(e.prompt_logprobs, abs=1e-5)
        for gs, es in zip(g.outputs, e.outputs, strict=True):
            assert gs.logprobs_mode == es.logprobs_mode == mode and gs.token_ids == es.token_ids
            assert gs.token_logprobs == pytest.approx(es.token_logprobs, abs=1e-5)
            assert [v.rank for v in gs.token_logprobs] == [
                v.rank for v in es.token_logprobs
            ]  # vLLM's ranks travel too
            assert [{t: v.rank for t, v in top.items()} for top in gs.top_logprobs] == [
                {t: v.rank for t, v in top.items()} for top in es.top_logprobs
            ]
            assert gs.logprobs[0][gs.token_ids[0]].rank == es.token_logprobs[0].rank
        assert [{t: v.rank for t, v in entry.items()} for entry in g.prompt_logprobs[1:]] == [
            {t: v.rank for t, v in entry.items()} for entry in e.prompt_logprobs[1:]
        ]


def test_ranks_round_trip_and_a_server_without_them_reads_as_rank_none() -> None:
    values = [Logprob(-0.5, 1), Logprob(-2.0, 9)]
    tops = [{5: Logprob(-0.5, 1)}, {6: Logprob(-0.25, 1), 7: Logprob(-2.0, 9)}]
    sample = CompletionOutput(0, [5, 7], values, tops, "length", 0, logprobs_mode="raw_logits")
    back = convert.sample_from_proto(convert.sample_to_proto(sample), True, True)
    assert [(v, v.rank) for v in back.token_logprobs] == [
        (-0.5, 1),
        (-2.0, 9),
    ] and back.logprobs_mode == "raw_logits"
    assert [{t: v.rank for t, v in top.items()} for top in back.top_logprobs] == [{5: 1}, {6: 1, 7: 9}]
    partial = convert.partial_from_proto(convert.partial_to_proto(PartialSample.of(sample)))
    assert [v.rank for v in partial.logprobs] == [1, 9]
    old = convert.sample_to_proto(sample)
    del old.logprob_ranks[:]
    for entry in old.top_logprobs:
        for item in entry.entries:
            item.ClearField("rank")
    old.ClearField("logprobs_mode")
    legacy = convert.sample_from_proto(old, True, True)
    assert [v.rank for v in legacy.token_logprobs] == [None, None] and legacy.token_logprobs == [-0.5, -2.0]
    assert legacy.top_logprobs[1][7].rank is None and legacy.logprobs_mode is None
