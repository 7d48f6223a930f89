"""check_stop_strings against the examples of vLLM's own tests (tests/detokenizer/test_check_stop_strings.py)."""

from __future__ import annotations

import pytest

from rollout.detokenize.stop_strings import check_stop_strings


@pytest.mark.parametrize("stop", [["a", "is"], ["is", "a"]])
def test_the_earliest_completing_stop_string_wins_whatever_the_list_order(stop: list[str]) -> None:
    assert check_stop_strings(" The user is a", len(" is a"), stop, include_in_output=False) == ("is", 10)
    assert check_stop_strings(" The user is a", len(" is a"), stop, include_in_output=True) == ("is", 12)


def test_completion_not_start_position_decides() -> None:
    assert check_stop_strings("abc", 3, ["abc", "b"], include_in_output=False) == ("b", 1)


@pytest.mark.parametrize(("stop", "expected"), [(["ab", "b"], ("ab", 0)), (["b", "ab"], ("b", 1))])
def test_ties_go_to_the_stop_list_order(stop: list[str], expected: tuple[str, int]) -> None:
    assert check_stop_strings("ab", 2, stop, include_in_output=False) == expected


def test_a_match_at_the_very_end_cuts_nothing_when_kept() -> None:
    assert check_stop_strings("hello world.", 1, ["."], include_in_output=False) == (".", 11)
    assert check_stop_strings("hello world.", 1, ["."], include_in_output=True) == (".", -1)


def test_no_match_no_new_text_or_no_stop_strings_is_none() -> None:
    assert check_stop_strings("hello", 5, ["zzz"], include_in_output=False) is None
    assert check_stop_strings("hello", 0, ["h"], include_in_output=False) is None
    assert check_stop_strings("hello", 5, [], include_in_output=False) is None


def test_only_matches_that_reach_into_the_new_text_count() -> None:
    """Text checked in an earlier step is not searched again, except where a match could straddle."""
    assert check_stop_strings("stop then", 2, ["stop"], include_in_output=False) is None
    assert check_stop_strings("xxsto" + "p", 1, ["stop"], include_in_output=False) == ("stop", 2)
