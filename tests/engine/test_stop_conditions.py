"""Every sample carries a finish reason: stop tokens, EOS, ignore_eos, max_tokens, context end, abort."""

from rollout import SamplingParams
from tests.builders import random_prompts, tiny_llm


def greedy_tokens(llm, prompt: list[int], max_tokens: int = 20) -> list[int]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return llm.generate([prompt], params)[0].outputs[0].token_ids


def test_stop_token_ends_the_sample_and_is_included() -> None:
    llm = tiny_llm(seed=2)
    prompt = random_prompts(1, 8, 8, seed=1)[0]
    full = greedy_tokens(llm, prompt)
    stop = full[5]
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop]))[
        0
    ].outputs[0]
    assert out.token_ids == full[: full.index(stop) + 1] and out.finish_reason == "stop"


def test_eos_stops_unless_ignored() -> None:
    llm = tiny_llm(seed=2)
    prompt = random_prompts(1, 8, 8, seed=1)[0]
    full = greedy_tokens(llm, prompt)
    llm.engine.eos_token_ids = frozenset({full[3]})
    stopped = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20))[0].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.token_ids == full[: full.index(full[3]) + 1]
    ignored = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))[
        0
    ].outputs[0]
    assert ignored.finish_reason == "length" and ignored.token_ids == full


def test_context_end_finishes_with_length() -> None:
    llm = tiny_llm(max_model_len=32)
    out = llm.generate([[5] * 28], SamplingParams(max_tokens=100, ignore_eos=True, seed=0))[0].outputs[0]
    assert len(out.token_ids) == 4 and out.finish_reason == "length"


def test_abort_returns_every_sample_with_reason_abort_and_frees_blocks() -> None:
    engine = tiny_llm().engine
    engine.add_request("a", [5, 6, 7], SamplingParams(n=3, max_tokens=50, ignore_eos=True, seed=0))
    engine.add_request("b", [5, 6, 8], SamplingParams(n=2, max_tokens=50, ignore_eos=True, seed=0))
    engine.step()
    engine.step()
    assert engine.abort_request("a") and not engine.abort_request("a")
    engine.add_request("c", [9] * 40, SamplingParams(n=4, max_tokens=5))
    assert engine.abort_request("c")  # never scheduled: its samples come back empty
    outs = {out.request_id: out for out in engine.step()}
    assert [c.finish_reason for c in outs["a"].outputs] == ["abort"] * 3 and outs["a"].finished
    assert all(len(c.token_ids) == 2 for c in outs["a"].outputs)
    assert [c.token_ids for c in outs["c"].outputs] == [[]] * 4
    engine.abort_request("b")
    engine.step()
    stats = engine.stats()
    assert stats["num_blocks_free"] == stats["num_blocks_total"] and not engine.has_unfinished_requests()


def test_every_sample_reports_the_weight_version() -> None:
    llm = tiny_llm()
    llm.engine.commit_weight_version(5)
    out = llm.generate([[3, 4]], SamplingParams(n=2, max_tokens=3, seed=0))[0]
    assert [c.weight_version for c in out.outputs] == [5, 5]
