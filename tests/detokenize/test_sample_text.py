"""SampleText: vLLM's detokenizer rules for stop strings, from its own test examples where it has them."""

from __future__ import annotations

import pytest

from rollout.detokenize.sample_text import SampleText
from rollout.sampling_params import SamplingParams
from tests.detokenize.tokenizer_builders import char_tokenizer, ids, piece_tokenizer


def chars(text: str) -> list[int]:
    return char_tokenizer()(text, add_special_tokens=False)["input_ids"]


def run(text: str, params: SamplingParams, min_tokens: int = 0) -> SampleText:
    state = SampleText(char_tokenizer(), chars("q "), params, min_tokens=min_tokens)
    state.feed(chars(text))
    return state


@pytest.mark.parametrize(
    ("min_tokens", "stop", "expected"),
    [(0, (), "is lee and i am a student"), (0, ("e",), "is l"), (5, ("e",), "is le")],
)
def test_min_tokens_hold_back_the_stop_check_as_vllm_test_min_tokens(min_tokens, stop, expected) -> None:
    """vLLM's tests/detokenizer/test_min_tokens.py ("is Lee, ..." with opt-125m: min_tokens=5 skips
    the "e"s of the first five tokens). One character per token here: the first five are "is le",
    so the "e" that stops it is the second of "lee"."""
    assert run("is lee and i am a student", SamplingParams(stop=stop), min_tokens).text == expected


@pytest.mark.parametrize("include", [False, True])
def test_a_stop_string_before_a_stop_token_still_cuts_as_vllm(include: bool) -> None:
    """vLLM's test_stop_string_while_stop_model_terminates: "abcde" then a stop token, stop "cd"."""
    state = SampleText(
        char_tokenizer(), chars("q"), SamplingParams(stop=("cd",), include_stop_str_in_output=include)
    )
    hit = state.feed(chars("abcde") + [2], stop_token_last=True)
    assert (hit, state.text, state.num_tokens) == ("cd", "abcd" if include else "ab", 4)


def test_a_stop_string_spanning_tokens_stops_at_the_token_that_completes_it() -> None:
    state = SampleText(piece_tokenizer(), ids("a"), SamplingParams(stop=("</answer>",)))
    hit = state.feed(ids("ab", "<", "/", "answer", ">", "cd"))
    assert (hit, state.text, state.num_tokens) == ("</answer>", "ab", 5)


@pytest.mark.parametrize(("include", "text"), [(False, "ab"), (True, "abcd")])
def test_a_stop_string_ending_inside_a_token_keeps_the_token_and_cuts_the_text(
    include: bool, text: str
) -> None:
    state = SampleText(
        piece_tokenizer(), ids("a"), SamplingParams(stop=("c",), include_stop_str_in_output=include)
    )
    hit = state.feed(ids("ab", "cd", "ef"))
    assert (hit, state.text, state.num_tokens) == ("c", text[: 3 if include else 2], 2)


def test_a_stop_token_adds_no_text_unless_kept() -> None:
    plain = SampleText(piece_tokenizer(), ids("a"), SamplingParams())
    plain.feed(ids("ab", "cd"), stop_token_last=True)
    kept = SampleText(piece_tokenizer(), ids("a"), SamplingParams(include_stop_str_in_output=True))
    kept.feed(ids("ab", "cd"), stop_token_last=True)
    assert (plain.text, kept.text) == ("ab", "abcd")


def test_special_tokens_are_written_only_when_asked() -> None:
    skipped = SampleText(piece_tokenizer(), ids("a"), SamplingParams())
    skipped.feed(ids("ab", "</s>", "</s>"))
    written = SampleText(piece_tokenizer(), ids("a"), SamplingParams(skip_special_tokens=False))
    written.feed(ids("ab", "</s>", "</s>"))
    assert (skipped.text, written.text) == ("ab", "ab</s></s>")
