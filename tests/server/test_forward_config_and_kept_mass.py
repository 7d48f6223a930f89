"""What a trainer needs from the server to check it samples its policy: the model config and the kept mass."""

from __future__ import annotations

import json

from rollout import SamplingParams
from tests.builders import random_prompts, tiny_llm
from tests.server.server_builders import client_for, make_engine, serving


def test_server_info_carries_the_model_config_as_json() -> None:
    engine = make_engine()
    with serving(engine) as server, client_for(server) as client:
        config = json.loads(client.server_info().model_config)
    assert config == json.loads(engine.model.config.to_json_string(use_diff=False))
    assert (
        config["rope_parameters"] == engine.model.config.rope_parameters
    )  # forward settings, not just shapes


def test_kept_log_mass_through_the_client_equals_offline() -> None:
    prompts = random_prompts(3, 3, 10, seed=5)
    params = SamplingParams(n=2, max_tokens=5, temperature=3.0, top_p=0.5, seed=1, logprobs=0)
    offline = tiny_llm(max_num_seqs=64).generate(prompts, params)
    with serving() as server, client_for(server) as client:
        online = client.generate(prompts, params)
    for got, want in zip(online, offline, strict=True):
        for a, b in zip(got.outputs, want.outputs, strict=True):
            assert a.kept_log_mass == b.kept_log_mass and len(a.kept_log_mass) == len(a.token_ids)
            assert all(m < 0 for m in a.kept_log_mass)


def test_kept_token_ids_on_request_through_the_client_equal_offline() -> None:
    prompts = random_prompts(2, 3, 10, seed=6)
    params = SamplingParams(n=2, max_tokens=4, temperature=3.0, top_k=4, seed=2, return_kept_tokens=True)
    offline = tiny_llm(max_num_seqs=64).generate(prompts, params)
    with serving() as server, client_for(server) as client:
        online = client.generate(prompts, params)
        plain = client.generate(prompts, SamplingParams(max_tokens=2, top_k=4, seed=2))
    assert [o.outputs for o in online] == [o.outputs for o in offline]
    for sample in (s for o in online for s in o.outputs):
        assert [len(ids) for ids in sample.kept_token_ids] == [4] * len(sample.token_ids)
        assert all(t in ids for t, ids in zip(sample.token_ids, sample.kept_token_ids, strict=True))
    assert all(s.kept_token_ids is None for o in plain for s in o.outputs)
