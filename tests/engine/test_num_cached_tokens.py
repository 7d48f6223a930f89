"""`RequestOutput.num_cached_tokens`: the prompt's prefix-cache hits when first scheduled (vLLM's count)."""

from __future__ import annotations

from rollout import SamplingParams
from tests.builders import tiny_llm

BLOCK = 16


def test_a_repeated_prompt_counts_its_full_blocks_before_the_last_token_once() -> None:
    llm = tiny_llm()
    prompt = list(range(3, 3 + 3 * BLOCK))  # 48 tokens: the third block holds the last token
    params = SamplingParams(n=3, max_tokens=4, temperature=1.0, seed=0)
    cold, warm = (llm.generate([prompt], params)[0] for _ in range(2))
    assert cold.num_cached_tokens == 0
    assert warm.num_cached_tokens == 2 * BLOCK  # the n samples fork it: counted once per prompt


def test_prompt_logprobs_recompute_the_prompt_so_nothing_counts_as_cached() -> None:
    llm = tiny_llm()
    prompt = list(range(3, 3 + 2 * BLOCK + 1))
    llm.generate([prompt], SamplingParams(max_tokens=2))
    out = llm.generate([prompt], SamplingParams(max_tokens=2, prompt_logprobs=0))[0]
    assert out.num_cached_tokens == 0
