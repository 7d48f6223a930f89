"""vLLM's four logprobs modes, checked against a teacher-forced forward of the same weights: "raw_logits" are
the model's logits, "raw_logprobs" their log-softmax, "processed_logits" the logits after logit_bias, the
min_tokens ban, temperature and top-k (dropped tokens -inf), "processed_logprobs" their log-softmax. The mode
never changes what is sampled, each row of a mixed batch gets its own, and the engine's default is
`LLM(logprobs_mode=...)`."""

from __future__ import annotations

import math

import pytest
import torch

from rollout import LLM, EngineConfig, SamplingParams
from tests.builders import random_prompts, reference_copy, tiny_model

MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")
TOL = 1e-4
BIAS = {7: 3.0, 9: -2.0}
SETTINGS = dict(
    n=2, max_tokens=6, temperature=0.7, top_k=5, seed=3, logprobs=3, logit_bias=BIAS, min_tokens=2
)
EOS = 2


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(model=tiny_model("llama", seed=4), config=EngineConfig(num_blocks=128))


def teacher_forced_logits(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    return logits[len(prompt) - 1 : -1]


def expected_values(logits: torch.Tensor, t: int, mode: str) -> torch.Tensor:
    """vLLM's meaning of `mode` at output position t, computed independently of the sampler."""
    if mode.startswith("raw_"):
        values = logits.double()
    else:
        values = logits.double().clone()
        for token, bias in BIAS.items():
            values[token] += bias
        if t < SETTINGS["min_tokens"]:
            values[EOS] = -math.inf
        values = values / SETTINGS["temperature"]
        kth = values.topk(SETTINGS["top_k"]).values[-1]
        values = values.masked_fill(values < kth, -math.inf)
    return values if mode.endswith("_logits") else torch.log_softmax(values, -1)


def assert_matches(sample, prompt: list[int], reference, mode: str) -> None:
    logits = teacher_forced_logits(reference, prompt, list(sample.token_ids))
    for t, token in enumerate(sample.token_ids):
        expected = expected_values(logits[t], t, mode)
        assert sample.token_logprobs[t] == pytest.approx(expected[token].item(), abs=TOL)
        top = sample.top_logprobs[t]
        values, ids = expected.topk(3)
        for tok, value in zip(ids.tolist(), values.tolist(), strict=True):
            assert top[tok] == pytest.approx(value, abs=TOL), (mode, t, tok)
    assert sample.cumulative_logprob == pytest.approx(sum(sample.token_logprobs), abs=1e-9)


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_carries_vllms_values_for_the_sampled_token_and_the_top_k(llm: LLM, mode: str) -> None:
    prompts = random_prompts(2, 5, 9, seed=6)
    reference = reference_copy(llm.engine.model)
    outs = llm.generate(prompts, SamplingParams(**SETTINGS, logprobs_mode=mode))
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.logprobs_mode == mode
        for sample in out.outputs:
            assert sample.logprobs_mode == mode
            assert_matches(sample, prompt, reference, mode)


def test_the_mode_changes_no_token_and_the_old_names_are_aliases(llm: LLM) -> None:
    prompts = random_prompts(3, 4, 8, seed=7)
    runs = {mode: llm.generate(prompts, SamplingParams(**SETTINGS, logprobs_mode=mode)) for mode in MODES}
    tokens = {mode: [[s.token_ids for s in o.outputs] for o in outs] for mode, outs in runs.items()}
    assert all(t == tokens["raw_logprobs"] for t in tokens.values())
    for alias, name in (("processed", "processed_logprobs"), ("raw", "raw_logprobs")):
        assert SamplingParams(logprobs_mode=alias).logprobs_mode == name
        again = llm.generate(prompts, SamplingParams(**SETTINGS, logprobs_mode=alias))
        assert [[s.token_logprobs for s in o.outputs] for o in again] == [
            [s.token_logprobs for s in o.outputs] for o in runs[name]
        ]


def test_each_row_of_a_mixed_batch_gets_its_own_mode(llm: LLM) -> None:
    prompts = random_prompts(4, 4, 8, seed=8)
    params = [SamplingParams(**SETTINGS, logprobs_mode=mode) for mode in MODES]
    together = llm.generate(prompts, params)
    for prompt, p, out in zip(prompts, params, together, strict=True):
        (alone,) = llm.generate([prompt], p)  # the forward may round differently in another batch: 1e-5
        for mixed, single in zip(out.outputs, alone.outputs, strict=True):
            assert mixed.token_ids == single.token_ids and mixed.logprobs_mode == p.logprobs_mode
            assert mixed.token_logprobs == pytest.approx(single.token_logprobs, abs=1e-5)
            for got, want in zip(mixed.top_logprobs, single.top_logprobs, strict=True):
                assert list(got) == list(want) and list(got.values()) == pytest.approx(
                    list(want.values()), abs=1e-5
                )


def test_the_engine_default_is_llms_logprobs_mode_and_a_request_overrides_it() -> None:
    llm = LLM(
        model=tiny_model("llama", seed=4), config=EngineConfig(num_blocks=64), logprobs_mode="raw_logits"
    )
    reference = reference_copy(llm.engine.model)
    prompt = random_prompts(1, 6, 6, seed=9)[0]
    plain = {k: v for k, v in SETTINGS.items()}
    (default,) = llm.generate([prompt], SamplingParams(**plain))
    (override,) = llm.generate([prompt], SamplingParams(**plain, logprobs_mode="processed"))
    assert default.logprobs_mode == "raw_logits" and override.logprobs_mode == "processed_logprobs"
    assert_matches(default.outputs[0], prompt, reference, "raw_logits")
    assert_matches(override.outputs[0], prompt, reference, "processed_logprobs")
    assert LLM(model=tiny_model(), config=EngineConfig(num_blocks=64)).engine.config.logprobs_mode == (
        "processed_logprobs"  # rollout's default (vLLM's is raw_logprobs)
    )


@pytest.mark.parametrize("mode", ["raw_logits", "processed_logits", "raw_logprobs"])
def test_prompt_logprobs_are_logits_under_a_logits_mode(llm: LLM, mode: str) -> None:
    prompt = random_prompts(1, 8, 8, seed=10)[0]
    (out,) = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=2, logprobs_mode=mode))
    with torch.no_grad():
        logits = reference_copy(llm.engine.model)(torch.tensor([prompt])).logits[0].float()
    expected = logits if mode.endswith("_logits") else torch.log_softmax(logits, -1)
    for j in range(1, len(prompt)):
        assert out.prompt_logprobs[j][prompt[j]] == pytest.approx(expected[j - 1, prompt[j]].item(), abs=TOL)


@pytest.mark.parametrize("bad", ["logits", "processed_probs", 3])
def test_an_unknown_mode_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(ValueError, match="^logprobs_mode must be one of raw_logprobs, processed_logprobs"):
        SamplingParams(logprobs_mode=bad)
    with pytest.raises(ValueError, match="^logprobs_mode must be one of"):
        EngineConfig(logprobs_mode=bad)


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logits"])
def test_ranks_are_vllms_in_the_distribution_the_mode_names(llm: LLM, mode: str) -> None:
    prompts = random_prompts(2, 5, 9, seed=11)
    reference = reference_copy(llm.engine.model)
    for prompt, out in zip(
        prompts, llm.generate(prompts, SamplingParams(**SETTINGS, logprobs_mode=mode)), strict=True
    ):
        for sample in out.outputs:
            logits = teacher_forced_logits(reference, prompt, list(sample.token_ids))
            for t, token in enumerate(sample.token_ids):
                expected = expected_values(logits[t], t, mode)
                top3 = expected.topk(3).indices.tolist()
                rank = top3.index(token) + 1 if token in top3 else int((expected >= expected[token]).sum())
                assert sample.token_logprobs[t].rank == rank
                assert [sample.top_logprobs[t][tok].rank for tok in top3] == [1, 2, 3]
                vllm = sample.logprobs[t]  # vLLM's per-position dict: the sampled token first, then the top k
                assert list(vllm)[0] == token and set(vllm) == {token, *top3}
                assert vllm[token].logprob == sample.token_logprobs[t] and vllm[token].rank == rank
