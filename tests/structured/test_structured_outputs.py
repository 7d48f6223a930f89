"""Structured outputs offline: samples follow the JSON schema, regex or choice (greedy and sampled,
n > 1), the mask is part of the processed distribution, bad specs are refused by name, and the other
rows of the batch are untouched bit for bit."""

from __future__ import annotations

import json
import math
import re

import pytest

from rollout import LLM, EngineConfig, SamplingParams
from rollout.structured_outputs import StructuredOutputsParams
from tests.builders import tiny_model
from tests.structured.builders import SCHEMA, follows_schema, structured_llm

pytest.importorskip("xgrammar")

PROMPTS = ["abc", "{x", "hello world"]
REGEX = "(yes|no)-[0-9]{2}"
CHOICES = ["alpha", "beta", "gamma delta"]


def _params(spec: StructuredOutputsParams, temperature: float, **kw: object) -> SamplingParams:
    return SamplingParams(
        n=3, temperature=temperature, seed=5, max_tokens=60, logprobs=0, structured_outputs=spec, **kw
    )


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_samples_parse_and_follow_the_schema(temperature: float) -> None:
    spec = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    outs = structured_llm().generate(PROMPTS, _params(spec, temperature))
    samples = [s for o in outs for s in o.outputs]
    assert len(samples) == 9 and all(s.finish_reason == "stop" for s in samples)
    assert all(follows_schema(s.text) for s in samples), [s.text for s in samples]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_regex_samples_match_the_whole_regex(temperature: float) -> None:
    outs = structured_llm().generate(PROMPTS, _params(StructuredOutputsParams(regex=REGEX), temperature))
    texts = [s.text for o in outs for s in o.outputs]
    assert len(texts) == 9 and all(re.fullmatch(REGEX, t) for t in texts), texts


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_choice_samples_are_one_of_the_choices(temperature: float) -> None:
    outs = structured_llm().generate(PROMPTS, _params(StructuredOutputsParams(choice=CHOICES), temperature))
    texts = [s.text for o in outs for s in o.outputs]
    assert len(texts) == 9 and set(texts) <= set(CHOICES), texts


def test_sampled_n_forks_follow_their_own_paths() -> None:
    """The n samples share the prompt's first logits, then each matcher follows its own tokens."""
    spec = StructuredOutputsParams(regex="[a-z]{3}-[0-9]{3}")
    outs = structured_llm().generate(
        ["abc"], SamplingParams(n=8, seed=3, max_tokens=20, structured_outputs=spec)
    )
    texts = [s.text for s in outs[0].outputs]
    assert all(re.fullmatch("[a-z]{3}-[0-9]{3}", t) for t in texts) and len(set(texts)) > 1, texts


def test_masked_tokens_have_processed_logprob_minus_inf_and_the_rest_renormalized() -> None:
    llm = structured_llm()
    vocab = llm.engine.vocab_size
    spec = StructuredOutputsParams(choice=CHOICES)
    masked = llm.generate(
        ["abc"], SamplingParams(max_tokens=1, seed=0, logprobs=vocab, structured_outputs=spec)
    )
    raw = llm.generate(["abc"], SamplingParams(max_tokens=1, seed=0, logprobs=vocab, logprobs_mode="raw"))
    first = masked[0].outputs[0].top_logprobs[0]
    allowed = {llm.tokenizer.convert_tokens_to_ids(c[0]) for c in CHOICES}
    assert {t for t, lp in first.items() if lp > -math.inf} == allowed
    assert all(first[t] == -math.inf for t in range(vocab) if t not in allowed)
    assert math.isclose(math.log(sum(math.exp(first[t]) for t in allowed)), 0.0, abs_tol=1e-6)
    unmasked = raw[0].outputs[0].top_logprobs[0]  # the model's own distribution, restricted and renormalized
    norm = math.log(sum(math.exp(unmasked[t]) for t in allowed))
    assert all(math.isclose(first[t], unmasked[t] - norm, abs_tol=1e-5) for t in allowed)


def test_raw_logprobs_under_a_grammar_are_the_masked_model_logits_as_in_vllm() -> None:
    """vLLM's model runner applies the grammar bitmask to the logits before its sampler computes
    raw_logprobs (vllm/v1/worker/gpu_model_runner.py sample_tokens, then v1/sample/sampler.py), so raw
    logprobs hold the mask; temperature and the other processors (logit_bias here) stay out, as in vLLM."""
    llm = structured_llm()
    vocab = llm.engine.vocab_size
    allowed = {llm.tokenizer.convert_tokens_to_ids(c[0]) for c in CHOICES}
    params = SamplingParams(
        max_tokens=1,
        seed=0,
        temperature=0.5,
        logprobs=vocab,
        logprobs_mode="raw",
        logit_bias={min(allowed): 5.0},
        structured_outputs=StructuredOutputsParams(choice=CHOICES),
    )
    raw = llm.generate(["abc"], params)[0].outputs[0].top_logprobs[0]
    plain = llm.generate(["abc"], SamplingParams(max_tokens=1, logprobs=vocab, logprobs_mode="raw"))
    model = plain[0].outputs[0].top_logprobs[0]  # the model's own log-softmax, no grammar
    norm = math.log(sum(math.exp(model[t]) for t in allowed))
    assert all(raw[t] == -math.inf for t in range(vocab) if t not in allowed)
    assert all(math.isclose(raw[t], model[t] - norm, abs_tol=1e-5) for t in allowed)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (StructuredOutputsParams(json='{"type": "nonsense"}'), "structured_outputs.json"),
        (StructuredOutputsParams(json="{not json"), "structured_outputs.json"),
        (StructuredOutputsParams(regex="(ab"), "structured_outputs.regex"),
        (StructuredOutputsParams(grammar="root ::= missing"), "structured_outputs.grammar"),
    ],
)
def test_a_spec_that_does_not_compile_is_refused_naming_the_field(spec, field: str) -> None:
    llm = structured_llm()
    with pytest.raises(ValueError, match=re.escape(field)):
        llm.generate(["abc"], SamplingParams(structured_outputs=spec))
    assert not llm.engine.has_unfinished_requests()


def test_exactly_one_kind_is_required() -> None:
    with pytest.raises(ValueError, match="structured_outputs: set exactly one"):
        StructuredOutputsParams(regex="a", choice=["a"])
    with pytest.raises(ValueError, match="structured_outputs: unknown key 'jsonn'"):
        SamplingParams(structured_outputs={"jsonn": "{}"})


def test_a_dict_is_accepted_as_vllm_does() -> None:
    params = SamplingParams(structured_outputs={"choice": ["a", "b"]})
    assert params.structured_outputs == StructuredOutputsParams(choice=("a", "b"))
    assert hash(SamplingParams(structured_outputs={"json": SCHEMA}))  # a dict schema stays hashable


def test_an_engine_without_a_tokenizer_refuses_structured_outputs() -> None:
    llm = LLM(model=tiny_model("llama", 0), config=EngineConfig(num_blocks=64))
    with pytest.raises(ValueError, match="structured_outputs: .*no tokenizer"):
        llm.generate([[5, 6, 7]], SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+")))


def test_other_rows_of_the_batch_are_unchanged_bit_for_bit() -> None:
    plain = SamplingParams(n=2, seed=11, max_tokens=12, logprobs=3, ignore_eos=True)
    alone = structured_llm().generate(PROMPTS, plain)
    llm = structured_llm()
    spec = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    mixed_params = [plain, _params(spec, 1.0), plain]
    mixed = llm.generate([PROMPTS[0], PROMPTS[1], PROMPTS[2]], mixed_params)
    for a, m in zip([alone[0], alone[2]], [mixed[0], mixed[2]], strict=True):
        assert [(s.token_ids, s.token_logprobs, s.top_logprobs) for s in a.outputs] == [
            (s.token_ids, s.token_logprobs, s.top_logprobs) for s in m.outputs
        ]
    assert all(follows_schema(s.text) for s in mixed[1].outputs)


def test_json_object_gives_a_json_object() -> None:
    spec = StructuredOutputsParams(json_object=True, disable_any_whitespace=True)
    outs = structured_llm().generate(
        ["abc"], SamplingParams(n=2, temperature=0.0, max_tokens=80, structured_outputs=spec)
    )
    for sample in outs[0].outputs:
        if sample.finish_reason == "stop":
            assert isinstance(json.loads(sample.text), dict)
        else:  # a random model may write a long string: the text is still a prefix of an object
            assert sample.text.startswith("{")


def test_the_compile_happens_once_per_spec() -> None:
    llm = structured_llm()
    spec = StructuredOutputsParams(regex=REGEX)
    llm.generate(PROMPTS, SamplingParams(structured_outputs=spec))
    llm.generate(PROMPTS, SamplingParams(n=2, structured_outputs=spec))
    assert llm.engine.grammars.compiler.num_compiled == 1


def test_a_grammar_the_vocabulary_cannot_continue_ends_that_sample_only() -> None:
    """No token writes "A": the mask is empty there, so that sample ends ("abort") with the tokens it
    drew from a real distribution, and the engine and the batch's other samples go on."""
    llm = structured_llm()
    spec = StructuredOutputsParams(regex="ab[A-Z]c")
    stuck = SamplingParams(max_tokens=8, logprobs=0, structured_outputs=spec)
    plain = SamplingParams(max_tokens=4, ignore_eos=True)
    out = llm.generate(["abc", "abc"], [stuck, plain])
    sample = out[0].outputs[0]
    assert sample.finish_reason == "abort" and sample.text == "ab"
    assert all(math.isfinite(x) for x in sample.token_logprobs)
    assert len(out[1].outputs[0].token_ids) == 4
    stats = llm.engine.stats()
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


def test_grammar_samples_follow_the_ebnf_grammar() -> None:
    spec = StructuredOutputsParams(grammar='root ::= ("yes" | "no") " " [0-9] [0-9]?')
    outs = structured_llm().generate(PROMPTS, _params(spec, 1.0))
    texts = [s.text for o in outs for s in o.outputs]
    assert len(texts) == 9 and all(re.fullmatch("(yes|no) [0-9][0-9]?", t) for t in texts), texts
