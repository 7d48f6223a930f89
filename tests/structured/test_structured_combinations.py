"""Structured outputs with min_tokens, allowed_token_ids and bad_words: samples follow the grammar and
every ban, processed logprobs are the model's softmax renormalized over the intersection of the masks
(an oracle built from xgrammar's matcher, the bans and a transformers forward), and a step where the
intersection is empty ends that sample alone with finish_reason "abort"."""

from __future__ import annotations

import logging
import math
import re

import pytest
import torch

from rollout import SamplingParams
from rollout.structured_outputs import StructuredOutputsParams
from tests.builders import reference_copy, tiny_model
from tests.structured.builders import SCHEMA, follows_schema, structured_llm, z_first_llm

xgr = pytest.importorskip("xgrammar")

EOS = 2
PROMPTS = ["abc", "{x"]


def _ids(llm, chars: str) -> tuple[int, ...]:
    return tuple(llm.tokenizer.convert_tokens_to_ids(c) for c in chars)


def _samples(outs: list) -> list:
    return [s for o in outs for s in o.outputs]


def test_min_tokens_delays_eos_and_the_json_still_follows_the_schema() -> None:
    """EOS is banned for 40 tokens; the JSON may close earlier (the grammar can then only end), which
    ends that sample with "abort" and its complete JSON. Every sample parses and has no early EOS."""
    spec = StructuredOutputsParams(json=SCHEMA)  # whitespace allowed: room to go past 40 tokens
    params = SamplingParams(
        n=4, seed=2, temperature=1.0, max_tokens=80, min_tokens=40, structured_outputs=spec
    )
    samples = _samples(structured_llm().generate(PROMPTS, params))
    assert all(EOS not in s.token_ids[:40] for s in samples)
    assert all(follows_schema(s.text) for s in samples), [s.text for s in samples]
    assert {s.finish_reason for s in samples} == {"stop", "abort"}
    assert all(len(s.token_ids) > 40 for s in samples if s.finish_reason == "stop")
    assert all(len(s.token_ids) < 40 for s in samples if s.finish_reason == "abort")


def test_min_tokens_under_a_grammar_that_can_go_on_always_stops_after_them() -> None:
    params = SamplingParams(
        n=4,
        seed=2,
        temperature=1.0,
        max_tokens=40,
        min_tokens=12,
        structured_outputs=StructuredOutputsParams(regex="[a-z ]+"),
    )
    samples = _samples(structured_llm().generate(PROMPTS, params))
    assert all(s.finish_reason in ("stop", "length") and len(s.token_ids) > 12 for s in samples)
    assert all(re.fullmatch("[a-z ]{12,}", s.text) for s in samples), [s.text for s in samples]


def test_allowed_token_ids_and_the_grammar_draw_only_from_their_intersection() -> None:
    llm = structured_llm()
    allowed = _ids(llm, "abc") + (EOS,)
    spec = StructuredOutputsParams(regex="[a-z]{4}-?")
    params = SamplingParams(
        n=4, seed=1, temperature=1.0, max_tokens=10, allowed_token_ids=allowed, structured_outputs=spec
    )
    texts = [s.text for s in _samples(llm.generate(PROMPTS, params))]
    assert all(re.fullmatch("[abc]{4}", t) for t in texts), texts


def test_bad_words_are_never_completed_under_a_grammar() -> None:
    spec = StructuredOutputsParams(regex="[ab]{8}")
    params = SamplingParams(
        n=6, seed=3, temperature=1.0, max_tokens=12, bad_words=["ab"], structured_outputs=spec
    )
    samples = _samples(structured_llm().generate(PROMPTS, params))
    assert all(s.finish_reason == "stop" for s in samples)
    assert all(re.fullmatch("[ab]{8}", s.text) and "ab" not in s.text for s in samples), [
        s.text for s in samples
    ]


def _oracle_logprobs(
    compiled, prompt: list[int], output: list[int], params: SamplingParams
) -> list[torch.Tensor]:
    """Per output token: log_softmax of a transformers forward's logits, masked by the grammar (xgrammar's
    own matcher, bits unpacked here), allowed_token_ids, the bad words and min_tokens' EOS ban."""
    with torch.no_grad():
        logits = reference_copy(tiny_model("llama", 0))(torch.tensor([prompt + output])).logits[0]
    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, logits.shape[-1])
    expected = []
    for t, token in enumerate(output):
        matcher.fill_next_token_bitmask(bitmask, 0)
        words = bitmask[0].tolist()
        ok = {v for v in range(logits.shape[-1]) if (words[v // 32] >> (v % 32)) & 1}
        ok &= set(params.allowed_token_ids)
        ok -= {
            w[-1]
            for w in params.bad_words_token_ids
            if t >= len(w) - 1 and tuple(output[t - len(w) + 1 : t]) == w[:-1]
        }
        ok -= {EOS} if t < params.min_tokens else set()
        row = torch.full_like(logits[0], float("-inf"))
        keep = torch.tensor(sorted(ok))
        row[keep] = logits[len(prompt) - 1 + t][keep]
        expected.append(torch.log_softmax(row, dim=-1))
        assert matcher.accept_token(token)
    return expected


def test_processed_logprobs_are_the_softmax_renormalized_over_every_mask() -> None:
    llm = structured_llm()
    vocab = llm.engine.vocab_size
    spec = StructuredOutputsParams(regex="[a-e]{2,6}")
    params = SamplingParams(
        seed=7,
        temperature=1.0,
        max_tokens=8,
        logprobs=vocab,
        min_tokens=4,
        allowed_token_ids=_ids(llm, "abcd") + (EOS,),
        bad_words_token_ids=((_ids(llm, "a")[0], _ids(llm, "b")[0]), (_ids(llm, "c")[0],) * 2),
        structured_outputs=spec,
    )
    prompt = llm.tokenizer.encode("abc")
    sample = llm.generate([prompt], params)[0].outputs[0]
    assert sample.finish_reason == "stop" and len(sample.token_ids) >= 5
    expected = _oracle_logprobs(llm.engine.grammars.compiler.compile(spec), prompt, sample.token_ids, params)
    for t, tops in enumerate(sample.top_logprobs):
        got = torch.tensor([tops.get(v, float("-inf")) for v in range(vocab)])
        assert torch.equal(got.isfinite(), expected[t].isfinite()), t
        torch.testing.assert_close(got, expected[t], rtol=0, atol=1e-4)
        assert math.isclose(sample.token_logprobs[t], expected[t][sample.token_ids[t]].item(), abs_tol=1e-4)


def test_an_empty_intersection_ends_that_sample_with_abort_and_the_other_completes() -> None:
    """After "ab" the grammar can only end, and min_tokens bans EOS: nothing is left to draw."""
    llm = structured_llm()
    stuck = SamplingParams(
        max_tokens=10, logprobs=0, min_tokens=5, structured_outputs=StructuredOutputsParams(regex="ab")
    )
    other = SamplingParams(
        max_tokens=10, logprobs=0, min_tokens=5, structured_outputs=StructuredOutputsParams(regex="[a-c]+")
    )
    out = llm.generate(["abc", "abc"], [stuck, other])
    aborted, completed = out[0].outputs[0], out[1].outputs[0]
    assert aborted.finish_reason == "abort" and aborted.text == "ab" and aborted.stop_reason is None
    assert all(math.isfinite(lp) for lp in aborted.token_logprobs)
    assert completed.finish_reason == "stop" and re.fullmatch("[a-c]{5,}", completed.text)
    stats = llm.engine.stats()
    assert stats["num_blocks_free"] == stats["num_blocks_total"]


def test_allowed_token_ids_outside_the_grammar_abort_at_the_first_token_for_every_fork() -> None:
    llm = structured_llm()
    spec = StructuredOutputsParams(regex="x+")
    params = SamplingParams(n=2, max_tokens=5, allowed_token_ids=_ids(llm, "ab"), structured_outputs=spec)
    plain = SamplingParams(max_tokens=3, ignore_eos=True)
    out = llm.generate(["abc", "abc"], [params, plain])
    assert [(s.finish_reason, s.token_ids) for s in out[0].outputs] == [("abort", [])] * 2
    assert len(out[1].outputs[0].token_ids) == 3


def test_a_token_the_grammar_allows_and_the_bans_forbid_is_never_drawn_from_nothing() -> None:
    """The grammar allows only "z" (id 0, what a NaN row's draw would give), allowed_token_ids forbids it."""
    llm = z_first_llm()
    spec = StructuredOutputsParams(regex="z")
    for temperature in (0.0, 1.0):
        params = SamplingParams(
            n=2,
            seed=0,
            temperature=temperature,
            max_tokens=4,
            logprobs=0,
            allowed_token_ids=(_ids(llm, "a")[0], EOS),
            structured_outputs=spec,
        )
        samples = llm.generate(["abc"], params)[0].outputs
        assert [(s.finish_reason, s.token_ids, s.token_logprobs) for s in samples] == [("abort", [], [])] * 2


def test_the_abort_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    params = SamplingParams(
        max_tokens=10, min_tokens=5, structured_outputs=StructuredOutputsParams(regex="ab")
    )
    with caplog.at_level(logging.WARNING, logger="rollout.engine.sample.empty_rows"):
        structured_llm().generate(["abc"], params)
    assert "no token the grammar allows here survives the bans (min_tokens)" in caplog.text
