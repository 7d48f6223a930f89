"""Builders for the in-flight update tests: drive an engine step by step and collect its samples."""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache

from rollout.engine.llm_engine import LLMEngine
from rollout.outputs import CompletionOutput


def step_until(engine: LLMEngine, done: dict[str, list[CompletionOutput]], predicate) -> None:
    """Steps until `predicate()`, collecting finished samples into `done` (request id -> samples)."""
    for _ in range(1000):
        if predicate():
            return
        for out in engine.step():
            done.setdefault(out.request_id, []).extend(out.outputs)
    raise AssertionError("the engine never reached the expected state")


def run_to_completion(engine: LLMEngine) -> dict[str, list[CompletionOutput]]:
    done: dict[str, list[CompletionOutput]] = {}
    step_until(engine, done, lambda: not engine.has_unfinished_requests())
    return {rid: sorted(samples, key=lambda s: s.index) for rid, samples in done.items()}


def output_len(engine: LLMEngine, request_id: str, sample: int = 0) -> int:
    return engine.requests[request_id].sequences[sample].num_output_tokens


def teacher_forced_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log p(completion[t] | prompt + completion[:t]) under `model`, one per completion token."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logprobs.gather(1, torch.tensor(completion)[:, None])[:, 0]


def keep_reference(
    old_model, new_state: dict[str, torch.Tensor], ids: list[int], num_new: int
) -> tuple[list[int], list[float]]:
    """transformers itself: the old model fills a DynamicCache with all of `ids` but the last token,
    the new weights are loaded, and greedy decoding continues on that cache for `num_new` tokens."""
    cache = DynamicCache(config=old_model.config)
    # transformers >= 5.24 names the argument `cache` (past_key_values is deprecated)
    keyword = "cache" if "cache" in inspect.signature(old_model.forward).parameters else "past_key_values"
    tokens, logprobs = [], []
    with torch.no_grad():
        old_model(torch.tensor([ids[:-1]]), **{keyword: cache}, use_cache=True)
        old_model.load_state_dict(new_state)
        last = ids[-1]
        for _ in range(num_new):
            logits = old_model(torch.tensor([[last]]), **{keyword: cache}, use_cache=True).logits[0, -1]
            row = torch.log_softmax(logits.float(), dim=-1)
            last = int(row.argmax())
            tokens.append(last)
            logprobs.append(float(row[last]))
    return tokens, logprobs
