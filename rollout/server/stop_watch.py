"""StopWatch: the server's detokenizer thread, which finds stop strings as the tokens come.

The engine loop never runs the tokenizer. After each step it hands this thread the new tokens of
the samples that have stop strings; the thread decodes them incrementally (SampleText, vLLM's
rules) and, when a stop string completes at output token k, asks the loop to finish that sample
there (`on_stop(request_id, sample_index, k + 1, stop_string)`), which frees its blocks. The loop
samples on meanwhile, so a sample may run a few tokens past its stop or even finish first: the RPC
thread's `finish_text` cuts it at the same token either way. This thread only saves compute.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rollout.detokenize.sample_text import SampleText
from rollout.detokenize.tokenizer_lock import TOKENIZER_LOCK
from rollout.sampling_params import SamplingParams

logger = logging.getLogger(__name__)
OnStop = Callable[[str, int, int, str], None]


@dataclass(frozen=True, slots=True)
class _Watch:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams


@dataclass(frozen=True, slots=True)
class _Forget:
    request_id: str


class StopWatch:
    """Thread-safe `watch`, `feed` and `forget`, applied in the order they were called."""

    def __init__(self, tokenizer: Any, on_stop: OnStop) -> None:
        self.tokenizer = tokenizer
        self.on_stop = on_stop
        self._inbox: queue.SimpleQueue[_Watch | _Forget | list[tuple[str, int, int]] | None] = (
            queue.SimpleQueue()
        )
        self._requests: dict[str, tuple[_Watch, dict[int, SampleText]]] = {}  # this thread's only
        self._thread = threading.Thread(target=self._run, name="rollout-stop-watch", daemon=True)

    def start(self) -> StopWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._inbox.put(None)
        self._thread.join()

    def watch(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> None:
        self._inbox.put(_Watch(request_id, prompt_ids, params))

    def feed(self, tokens: list[tuple[str, int, int]]) -> None:
        """New tokens, as (request id, sample index, token id), in the order they were sampled."""
        if tokens:
            self._inbox.put(tokens)

    def forget(self, request_id: str) -> None:
        self._inbox.put(_Forget(request_id))

    def _run(self) -> None:
        while (item := self._inbox.get()) is not None:
            if isinstance(item, _Watch):
                self._requests[item.request_id] = (item, {})
            elif isinstance(item, _Forget):
                self._requests.pop(item.request_id, None)
            else:
                self._check(item)

    def _check(self, tokens: list[tuple[str, int, int]]) -> None:
        with TOKENIZER_LOCK:
            hits = [hit for hit in map(self._push, tokens) if hit is not None]
        for hit in hits:
            self.on_stop(*hit)

    def _push(self, token: tuple[str, int, int]) -> tuple[str, int, int, str] | None:
        request_id, index, token_id = token
        entry = self._requests.get(request_id)
        if entry is None:
            return None
        watch, samples = entry
        try:
            text = samples.get(index) or samples.setdefault(
                index, SampleText(self.tokenizer, watch.prompt_ids, watch.params)
            )
            if text.stop_string is not None:
                return None  # already asked for; tokens sampled meanwhile are dropped by the engine
            hit = text.push(token_id)
        except Exception:  # the RPC thread's finish_text meets the same error and reports it
            logger.exception(
                "stop-string check failed for request %s; it runs to its other limits", request_id
            )
            self._requests.pop(request_id, None)
            return None
        return None if hit is None else (request_id, index, text.num_tokens, hit)
