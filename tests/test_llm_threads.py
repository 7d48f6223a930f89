"""One `LLM` shared by threads: every call gets its own results, none hangs or dies."""

from __future__ import annotations

import threading

from rollout import SamplingParams
from tests.builders import random_prompts, tiny_llm

PARAMS = SamplingParams(n=2, max_tokens=24, temperature=1.0, seed=5, ignore_eos=True)


def test_two_threads_generating_on_one_llm_each_get_what_they_get_alone() -> None:
    prompts = [random_prompts(4, 5, 30, seed=s) for s in (1, 2)]
    alone = [[o.outputs for o in tiny_llm().generate(p, PARAMS)] for p in prompts]
    llm = tiny_llm()
    results: dict[int, object] = {}
    start = threading.Barrier(2)

    def run(k: int) -> None:
        start.wait()
        try:
            results[k] = [o.outputs for o in llm.generate(prompts[k], PARAMS)]
        except BaseException as exc:  # noqa: BLE001 - the test reports it below
            results[k] = exc

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)  # generous: a lost wake-up hangs forever, a correct run takes ~1 s
    assert not any(t.is_alive() for t in threads), "a generate call hung"
    assert [results[0], results[1]] == alone
