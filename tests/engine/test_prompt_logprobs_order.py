"""Prompt logprobs entries in vLLM's order (tests/server/test_prompt_logprobs_order_wire.py: over gRPC): per position the
prompt token's own entry first, then the top k (a prompt token among them appears once, in first place, with
its top-k entry), so vLLM's `next(iter(entry.values()))` is the prompt token's Logprob. The oracle is vLLM's
rule (vllm/logprobs.py, append_logprobs_for_next_position) applied to transformers' teacher-forced forward."""

from __future__ import annotations

import pytest
import torch

from rollout import SamplingParams
from tests.builders import reference_copy, tiny_llm

K = 3


def vllm_entries(llm, prompt: list[int], k: int) -> list[list[tuple[int, float, int]]]:
    """Per prompt position after the first: vLLM's dict as (token, logprob, rank) in key order."""
    with torch.no_grad():
        logits = reference_copy(llm.engine.model)(torch.tensor([prompt])).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)
    out = []
    for row, token in zip(logprobs[:-1], prompt[1:], strict=True):
        own = row[token].item()
        top = row.topk(k)
        ids = [token, *top.indices.tolist()]
        values = [own, *top.values.tolist()]
        ranks = [int((row >= own).sum()), *range(1, k + 1)]
        entry = {t: (v, r) for t, v, r in zip(ids, values, ranks, strict=True)}  # vLLM's dict comprehension
        out.append([(t, v, r) for t, (v, r) in entry.items()])
    return out


def as_tuples(entries: list) -> list[list[tuple[int, float, int]]]:
    return [[(t, float(v), v.rank) for t, v in entry.items()] for entry in entries[1:]]


def assert_vllm_order(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert [(t, r) for t, _, r in g] == [(t, r) for t, _, r in w]  # same keys, same order, same ranks
        assert [v for _, v, _ in g] == pytest.approx([v for _, v, _ in w], abs=1e-4)


def prompt_with_greedy_tail(llm) -> list[int]:
    """A prompt whose last tokens are the model's greedy picks (rank 1: among the top k), the rest random."""
    head = [5, 91, 37, 40, 8]
    tail = llm.generate([head], SamplingParams(max_tokens=3, temperature=0.0))[0].outputs[0].token_ids
    return head + list(tail)


def test_offline_entries_open_with_the_prompt_token_in_vllms_order() -> None:
    llm = tiny_llm()
    prompt = prompt_with_greedy_tail(llm)
    entries = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=K))[0].prompt_logprobs
    want = vllm_entries(llm, prompt, K)
    assert {len(w) for w in want} == {K, K + 1}  # both cases: among the top k and not
    assert_vllm_order(as_tuples(entries), want)
    for entry, token in zip(entries[1:], prompt[1:], strict=True):
        first = next(iter(entry.values()))  # vLLM's idiom for the prompt token's Logprob
        assert next(iter(entry)) == token and first is entry[token]


def test_prompt_logprobs_zero_hold_only_the_prompt_token() -> None:
    llm = tiny_llm()
    prompt = prompt_with_greedy_tail(llm)
    entries = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=0))[0].prompt_logprobs
    assert [list(entry) for entry in entries[1:]] == [[token] for token in prompt[1:]]
