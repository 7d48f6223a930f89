"""The fleet's routing decisions without Ray: prefix index, then session > prefix > load."""

from __future__ import annotations

from rollout.fleet.prefix_index import PrefixIndex
from rollout.fleet.replica_calls import OpenAICall
from rollout.fleet.routing_policy import RoutingInputs, rank_replicas


def test_a_later_turns_text_extends_the_earlier_turns_keys() -> None:
    turn1 = [{"role": "user", "content": "a long first question about things"}]
    turn2 = [*turn1, {"role": "assistant", "content": "an answer"}, {"role": "user", "content": "more"}]
    index = PrefixIndex(chunk_chars=8)
    first = index.keys(OpenAICall("/chat/completions", {"messages": turn1}).prefix_text())
    second = index.keys(OpenAICall("/chat/completions", {"messages": turn2}).prefix_text())
    assert len(second) > len(first) > 0 and second[: len(first)] == first


def test_the_index_counts_leading_chunks_held_and_forgets_a_replica() -> None:
    index = PrefixIndex(chunk_chars=4)
    index.insert(index.keys("abcdefghijkl"), "r1")
    index.insert(index.keys("abcdXXXX"), "r2")
    assert index.match(index.keys("abcdefghZZZZ"), ["r1", "r2", "r3"]) == {"r1": 2, "r2": 1, "r3": 0}
    index.remove("r1")
    assert index.match(index.keys("abcdefgh"), ["r1", "r2"]) == {"r1": 0, "r2": 1}


def test_the_index_keeps_at_most_capacity_keys_least_recent_out() -> None:
    index = PrefixIndex(chunk_chars=1, capacity=3)
    index.insert(index.keys("abcd"), "r1")
    assert len(index) == 3 and index.match(index.keys("a"), ["r1"]) == {"r1": 0}


def test_a_session_wins_over_prefix_and_load() -> None:
    inputs = RoutingInputs(["a", "b"], {"a": 50, "b": 0}, {"b": 9}, session_replica="a")
    assert rank_replicas(inputs, imbalanced_threshold=8) == [["a"], ["b"]]


def test_the_longest_prefix_wins_while_load_is_balanced() -> None:
    inputs = RoutingInputs(["a", "b", "c"], {"a": 3, "b": 0, "c": 1}, {"a": 5, "b": 2})
    assert rank_replicas(inputs, imbalanced_threshold=8) == [["a"], ["b", "c"]]


def test_load_wins_past_the_imbalance_threshold() -> None:
    inputs = RoutingInputs(["a", "b"], {"a": 20, "b": 2}, {"a": 5})
    assert rank_replicas(inputs, imbalanced_threshold=8) == [["b", "a"]]


def test_without_a_match_the_least_loaded_goes_first() -> None:
    inputs = RoutingInputs(["a", "b"], {"a": 4, "b": 1}, {})
    assert rank_replicas(inputs, imbalanced_threshold=8) == [["b", "a"]]


def test_the_session_key_is_the_header_else_the_user_field() -> None:
    assert OpenAICall("/completions", {"user": "u1"}, {"x-session-id": "s1"}).session == "s1"
    assert OpenAICall("/completions", {"user": "u1"}).session == "u1"
    assert OpenAICall("/completions", {}).session is None


def test_a_token_in_chat_is_keyed_by_its_prompt_ids_first() -> None:
    index = PrefixIndex(chunk_chars=8)
    first = OpenAICall("/chat/completions", {"messages": [{"role": "user", "content": "a"}]}).prefix_text()
    turn2 = {"messages": [{"role": "tool", "content": "b"}], "prompt_token_ids": list(range(10, 40))}
    turn3 = {"messages": [{"role": "tool", "content": "c"}], "prompt_token_ids": list(range(10, 60))}
    keys2 = index.keys(OpenAICall("/chat/completions", turn2).prefix_text())
    keys3 = index.keys(OpenAICall("/chat/completions", turn3).prefix_text())
    shared = len("".join(f"{t}," for t in range(10, 40))) // 8
    assert keys3[:shared] == keys2[:shared] and index.keys(first)[:1] != keys2[:1]
