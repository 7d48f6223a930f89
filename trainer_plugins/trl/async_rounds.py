"""Async rounds: round t+1 is generated on the servers while the trainer trains on round t.

GRPOTrainer asks for a round's completions when the round's prompts come out of its dataloader. To
start round t+1 early, the plugin looks one generation batch ahead in that dataloader
(`LookaheadLoader`: the same batches in the same order, only fetched earlier) and, when round t's
completions are handed to TRL, submits round t+1's prompts, tokenized by TRL's own
`_tokenize_prompts`, from a background thread. Round t+1 is thus generated with the weights pushed
before round t: one push behind the weights it is trained with. TRL's importance-sampling correction
(required on in this mode) divides by the servers' per-token behaviour logprobs, the logprob of each
token under the weights that sampled it, so the lag is corrected token by token.

Nothing is trained on silently: a prefetched round is used only if its prompts are exactly the ones
TRL asks for and its oldest token is at most `max_lag` pushes old; otherwise it is dropped and the
round generated afresh (`events` says which). A round that a restarted server took part in, or
that a server stopped answering during, is dropped too ("dropped: restart"): the fresh round then
rides the restart out (generation.py). Other errors of the background call surface in the trainer's
thread when the round is taken; `close()` waits for the call in flight, so no thread outlives train().
"""

from __future__ import annotations

import copy
import logging
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import server_restarts

logger = logging.getLogger(__name__)


class LookaheadLoader:
    """The train DataLoader, iterated as before; `peek(k)` shows the k-th batch after the last one yielded."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._pending: deque[Any] = deque()
        self._iterator: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        self._pending.clear()
        self._iterator = iter(self._loader)
        while True:
            if self._pending:
                yield self._pending.popleft()
                continue
            try:
                batch = next(self._iterator)
            except StopIteration:
                return
            yield batch

    def peek(self, k: int) -> Any | None:
        """None past the end of the current epoch (that round is then generated when asked for)."""
        while len(self._pending) < k:
            if self._iterator is None:
                return None
            try:
                self._pending.append(next(self._iterator))
            except StopIteration:
                return None
        return self._pending[k - 1]

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:  # set_epoch, batch_sampler, ... of the wrapped loader
        return getattr(self._loader, name)


@dataclass(frozen=True)
class RoundEvent:
    """What happened to a round: "submitted", "used", "dropped: prompts", "dropped: lag",
    "dropped: restart", "fresh"."""

    kind: str
    global_step: int
    versions: tuple[int, ...] = ()  # the round's oldest version per sample, when known


@dataclass
class _Prefetch:
    prompt_ids: list[list[int]]  # one per unique prompt
    future: Future
    recoveries: int  # the generation's restart recoveries when it was submitted


class AsyncRounds:
    """The lookahead and the background call of the async mode; `generation` is the RolloutGeneration."""

    def __init__(self, trainer: Any, generation: Any, max_lag: int) -> None:
        self.trainer = trainer
        self.generation = generation
        self.max_lag = max_lag
        self.loader: LookaheadLoader | None = None
        self.events: list[RoundEvent] = []
        self._pool: ThreadPoolExecutor | None = None  # made on the first submit, gone after close()
        self._pending: _Prefetch | None = None

    def wrap(self, loader: Any) -> LookaheadLoader:
        self.loader = LookaheadLoader(loader)
        return self.loader

    def take(self, prompt_ids: list[list[int]], n: int) -> Any | None:
        """The prefetched round for these unique prompts, if usable; None: generate it now."""
        pending, self._pending = self._pending, None
        if pending is None:
            self._record("fresh")
            return None
        batch = self._result(pending)
        if batch is None:
            self._record("dropped: restart")
            return None
        versions = tuple(batch.versions)
        if pending.prompt_ids != prompt_ids:
            self._record("dropped: prompts", versions)
            return None
        oldest_allowed = self._oldest_allowed_version()
        if oldest_allowed is None or min(versions) < oldest_allowed:
            logger.warning(
                "rollout async: round generated with versions %s is more than max_lag=%d pushes behind; "
                "generating it again",
                sorted(set(versions)),
                self.max_lag,
            )
            self._record("dropped: lag", versions)
            return None
        self._record("used", versions)
        return batch

    def submit_next(self, n: int) -> None:
        """Starts generating the next round's prompts, if the dataloader has them this epoch."""
        generate_every = self.trainer.args.steps_per_generation * self.trainer.num_iterations
        rows = self.loader.peek(generate_every) if self.loader is not None else None
        if rows is None:
            return
        prompts = copy.deepcopy([row["prompt"] for row in rows])
        prompt_ids, images, _ = self.trainer._tokenize_prompts(prompts)
        if images is not None and any(image is not None for image in images):
            return  # multimodal prompts are refused when their round is asked for
        unique = [list(ids) for ids in prompt_ids[::n]]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="rollout-async-round")
        future = self._pool.submit(self.generation._request, unique, n, None)
        self._pending = _Prefetch(unique, future, self.generation.recoveries)
        self._record("submitted")

    def _result(self, pending: _Prefetch) -> Any | None:
        """The round, or None if a server restarted or stopped answering since it was submitted."""
        try:
            batch = pending.future.result()  # a failure of the background call is raised here
        except Exception as exc:
            if not server_restarts.gone(exc):
                raise
            return None
        watch = self.generation.watch
        if pending.recoveries != self.generation.recoveries or (watch is not None and watch.restarted()):
            return None
        return batch

    def close(self) -> None:
        """Waits for the call in flight (its result is dropped) and stops the thread."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.future.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _oldest_allowed_version(self) -> int | None:
        pushed = self.generation.pushed_versions
        if not pushed:
            return None
        return pushed[max(0, len(pushed) - 1 - self.max_lag)]

    def _record(self, kind: str, versions: tuple[int, ...] = ()) -> None:
        self.events.append(RoundEvent(kind, int(self.trainer.state.global_step), versions))
