"""For random small regex and choice grammars with random allowed_token_ids, bad_words and min_tokens,
on a tiny model with a character tokenizer: every sample keeps every ban, and ends either with EOS and
text the grammar matches, or with "abort" (a step where no token survived): property-based."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from rollout import SamplingParams
from rollout.structured_outputs import StructuredOutputsParams
from tests.structured.builders import z_first_llm

pytest.importorskip("xgrammar")

EOS = 2
ALPHABET = "zabcd"  # "z" is id 0: what a row drawn from nothing would write (builders.z_first_tokenizer)
MAX_TEXT = 12  # the grammars below write at most this many characters, so no sample ends on length
WORD = st.text(ALPHABET, min_size=1, max_size=3)


@st.composite
def regexes(draw) -> str:
    """1-3 atoms, each a character class or a literal, with a bounded quantifier (at most 4 chars each)."""
    atoms = []
    for _ in range(draw(st.integers(1, 3))):
        chars = draw(st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=3, unique=True))
        atom = f"[{''.join(sorted(chars))}]" if draw(st.booleans()) else f"({chars[0]})"
        atoms.append(atom + draw(st.sampled_from(["", "?", "{1,2}", "{0,4}", "{2}"])))
    return "".join(atoms)


GRAMMARS = st.one_of(
    regexes().map(lambda r: StructuredOutputsParams(regex=r)),
    st.lists(WORD, min_size=1, max_size=3, unique=True).map(lambda c: StructuredOutputsParams(choice=c)),
)


@pytest.fixture(scope="module")
def llm():
    return z_first_llm()


def _ids(llm, text: str) -> list[int]:
    return [llm.tokenizer.convert_tokens_to_ids(c) for c in text]


def _completes_a_bad_word(output: list[int], words: list[list[int]]) -> bool:
    return any(output[i : i + len(w)] == w for w in words for i in range(len(output) - len(w) + 1))


def _pattern(spec: StructuredOutputsParams) -> str:
    return spec.regex if spec.kind == "regex" else "|".join(re.escape(c) for c in spec.choice)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_sample_follows_its_grammar_and_bans_or_is_aborted(llm, data: st.DataObject) -> None:
    spec = data.draw(GRAMMARS, label="grammar")
    allowed = data.draw(st.one_of(st.none(), st.text(ALPHABET, min_size=1, max_size=4)), label="allowed")
    bad_words = data.draw(st.lists(st.text(ALPHABET, min_size=1, max_size=2), max_size=2), label="bad_words")
    min_tokens = data.draw(st.integers(0, 5), label="min_tokens")
    allowed_ids = None if allowed is None else tuple(_ids(llm, allowed)) + (EOS,)
    # the static refusal: every allowed token can be banned (tests/engine/test_logits_processors.py)
    banned = {_ids(llm, w)[-1] for w in bad_words} | ({EOS} if min_tokens else set())
    assume(allowed_ids is None or not set(allowed_ids) <= banned)
    params = SamplingParams(
        n=2,
        seed=data.draw(st.integers(0, 2**16), label="seed"),
        temperature=data.draw(st.sampled_from([0.0, 1.0]), label="temperature"),
        max_tokens=MAX_TEXT + 1,
        min_tokens=min_tokens,
        allowed_token_ids=allowed_ids,
        bad_words=tuple(bad_words),
        structured_outputs=spec,
    )
    words = [_ids(llm, w) for w in bad_words]
    for sample in llm.generate(["abc"], params)[0].outputs:
        tokens = sample.token_ids
        event(sample.finish_reason)  # --hypothesis-show-statistics: both endings occur
        text = tokens[:-1] if sample.finish_reason == "stop" else tokens
        assert EOS not in text and not _completes_a_bad_word(tokens, words), (sample, params)
        assert allowed_ids is None or set(tokens) <= set(allowed_ids), (sample, params)
        assert sample.finish_reason in ("stop", "abort"), (sample, params)
        if sample.finish_reason == "stop":
            assert tokens[-1] == EOS and len(text) >= min_tokens, (sample, params)
            assert re.fullmatch(_pattern(spec), sample.text), (sample, params)
