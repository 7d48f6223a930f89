"""One `RolloutClient.generate` call over several servers: streams, retries, failover.

A call deals its prompt groups to the servers by load (client/load_balance.py), runs one Generate stream per
server concurrently, retries a stream answered UNAVAILABLE (server starting, paused or draining) or
RESOURCE_EXHAUSTED with a retry-after hint (over the server's bound or this caller's share of it),
and, when a server stays unreachable while others live, gives it up and sends its unfinished prompts
to the live ones. Any other failure cancels the call's other streams and is raised.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from rollout.outputs import CompletionOutput, RequestOutput
from rollout.protocol import convert
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.score_wire import prompt_logprobs_from_proto
from rollout.sampling_params import SamplingParams

if TYPE_CHECKING:
    from rollout.client.load_balance import LoadBalancer


@dataclass(frozen=True)
class Servers:
    """What a generate call uses of its client: a stub per address, the shared balancer, the retry
    budget and the call metadata (the client owns them; every call of that client shares them)."""

    stubs: Mapping[str, pb_grpc.RolloutServiceStub]
    balancer: LoadBalancer
    max_retries: int
    metadata: tuple[tuple[str, str], ...]


class GenerateCall:
    """One `generate`: a Generate stream per server, run concurrently, retried on UNAVAILABLE."""

    def __init__(
        self,
        servers: Servers,
        params_pb: pb.SamplingParams,
        params: SamplingParams,
        prefix: str,
        deadline: float | None,
    ):
        self.servers, self.params_pb, self.params = servers, params_pb, params
        self.prefix, self.deadline = prefix, deadline
        self._streams: list[grpc.Call] = []
        self._lock = threading.Lock()
        self._failed = False

    def run(self, messages: list[pb.Prompt], costs: list[int]) -> list[RequestOutput]:
        """Every prompt's samples; prompts of a server that stops answering go to the live ones."""
        results: dict[int, RequestOutput] = {}
        pending = list(range(len(messages)))
        while pending:
            shards = self._assign(pending, costs)
            pending = []
            with contextlib.closing(self._run_shards(shards, messages, costs)) as outcomes:
                for address, indices, outcome in outcomes:
                    if isinstance(outcome, dict):
                        results.update(outcome)
                    elif self._server_died(address, outcome):
                        pending += indices
                    else:
                        self._cancel_all()  # a real failure: stop the others instead of waiting on them
                        raise outcome
        return [results[i] for i in range(len(messages))]

    def _assign(self, indices: list[int], costs: list[int]) -> dict[str, list[int]]:
        shards = self.servers.balancer.assign([costs[i] for i in indices])
        return {address: [indices[k] for k in ks] for address, ks in shards.items()}

    def _run_shards(
        self, shards: dict[str, list[int]], messages: list[pb.Prompt], costs: list[int]
    ) -> Iterator[tuple[str, list[int], dict[int, RequestOutput] | BaseException]]:
        """Each shard's results or its exception, as the shards end."""
        if len(shards) == 1:
            ((address, indices),) = shards.items()
            yield address, indices, _outcome(self._released_shard, address, indices, messages, costs)
            return
        with ThreadPoolExecutor(len(shards), thread_name_prefix="rollout-client") as pool:
            futures = {
                pool.submit(_outcome, self._released_shard, a, idx, messages, costs): a
                for a, idx in shards.items()
            }
            for future in as_completed(futures):
                yield futures[future], shards[futures[future]], future.result()

    def _released_shard(
        self, address: str, indices: list[int], messages: list[pb.Prompt], costs: list[int]
    ) -> dict[int, RequestOutput]:
        """A shard whose tokens stop counting as the server's load when it ends, however it ends."""
        try:
            return self._shard(address, indices, messages)
        finally:
            self.servers.balancer.release(address, sum(costs[i] for i in indices))

    def _server_died(self, address: str, exc: BaseException) -> bool:
        """A server still UNAVAILABLE after the retries, while others live, is given up on (by every
        call of the client: one that finds it given up by another call re-routes as well)."""
        if not (isinstance(exc, grpc.RpcError) and retryable(exc)) or self._failed:
            return False
        return self.servers.balancer.give_up(address, f"{exc.code().name}: {exc.details()}")

    def _shard(self, address: str, indices: list[int], messages: list[pb.Prompt]) -> dict[int, RequestOutput]:
        stub = self.servers.stubs[address]
        shard_id = f"{self.prefix}@{address}"
        request = pb.GenerateRequest(
            request_id=shard_id, prompts=[messages[i] for i in indices], params=self.params_pb
        )
        samples: dict[int, dict[int, CompletionOutput]] = {i: {} for i in range(len(indices))}
        prompt_ids: dict[int, list[int]] = {}
        heads: dict[int, pb.GenerateResponse] = {}  # per prompt index, its first message
        for attempt in attempts(self.servers.max_retries, self.deadline):
            try:
                for response in self._stream(stub, request):
                    self._record(response, samples, prompt_ids, heads)
                break
            except grpc.RpcError as exc:
                if (
                    self._failed
                    or not attempt.retries(exc)
                    or attempt.last
                    or self.servers.balancer.is_dead(address)
                ):
                    raise  # a server another call gave up on is not waited for: the prompts re-route
        return {
            indices[k]: self._output(messages[indices[k]], prompt_ids, k, s, heads.get(k))
            for k, s in samples.items()
        }

    def _stream(
        self, stub: pb_grpc.RolloutServiceStub, request: pb.GenerateRequest
    ) -> Iterator[pb.GenerateResponse]:
        call = stub.Generate(request, timeout=remaining(self.deadline), metadata=self.servers.metadata)
        with self._lock:
            if self._failed:
                call.cancel()
            self._streams.append(call)
        return call

    def _record(
        self,
        response: pb.GenerateResponse,
        samples: dict[int, dict[int, CompletionOutput]],
        prompt_ids: dict[int, list[int]],
        heads: dict[int, pb.GenerateResponse],
    ) -> None:
        want_logprobs = self.params.logprobs is not None
        want_top = bool(self.params.logprobs)
        sample = convert.sample_from_proto(response.sample, want_logprobs, want_top)
        samples[response.prompt_index][sample.index] = sample  # a replay after a retry overwrites
        if response.prompt_token_ids:
            prompt_ids[response.prompt_index] = list(response.prompt_token_ids)
            heads[response.prompt_index] = response

    def _output(
        self,
        message: pb.Prompt,
        prompt_ids: dict[int, list[int]],
        k: int,
        samples: dict[int, CompletionOutput],
        head: pb.GenerateResponse | None,
    ) -> RequestOutput:
        if len(samples) != self.params.n or k not in prompt_ids:
            raise RuntimeError(
                f"server stream for {message.request_id} ended with {len(samples)}/{self.params.n} samples"
            )
        outputs = [samples[i] for i in sorted(samples)]
        asked = self.params.prompt_logprobs is not None
        entries = prompt_logprobs_from_proto(list(head.prompt_logprobs) if head else [], asked, prompt_ids[k])
        cached = head.num_cached_tokens if head is not None and head.HasField("num_cached_tokens") else None
        return RequestOutput(message.request_id, prompt_ids[k], outputs, True, None, entries, cached)

    def _cancel_all(self) -> None:
        with self._lock:
            self._failed = True
            for call in self._streams:
                call.cancel()


class Attempt:
    def __init__(self, last: bool):
        self.last = last
        self.wait_s = 0.0  # at least this long before the next attempt (the server's retry-after)

    def retries(self, exc: grpc.RpcError) -> bool:
        """Whether `exc` is worth another attempt: UNAVAILABLE, or RESOURCE_EXHAUSTED with the
        server's retry-after hint (an admission refusal; a message too large has none), whose wait
        it records."""
        hint = retry_after_s(exc)
        if hint is not None:
            self.wait_s = hint * (1.0 + 0.5 * random.random())  # spread the callers refused together
            return True
        return retryable(exc)


def attempts(max_retries: int, deadline: float | None) -> Iterator[Attempt]:
    """Attempt markers with exponential backoff between them (at least the server's retry-after),
    bounded by retries and deadline."""
    for attempt in range(max_retries + 1):
        last = attempt == max_retries or (deadline is not None and time.monotonic() >= deadline)
        marker = Attempt(last)
        yield marker
        if last:
            return
        pause = max(min(0.1 * 2**attempt, 2.0), marker.wait_s)
        if deadline is not None:
            pause = min(pause, max(deadline - time.monotonic(), 0.0))
        time.sleep(pause)


def retryable(exc: grpc.RpcError) -> bool:
    """UNAVAILABLE: the server is starting, paused, draining or gone."""
    return isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNAVAILABLE


def retry_after_s(exc: grpc.RpcError) -> float | None:
    """The server's retry-after hint (seconds) on a RESOURCE_EXHAUSTED refusal, else None."""
    if not isinstance(exc, grpc.Call) or exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    for key, value in exc.trailing_metadata() or ():
        if key == "retry-after":
            try:
                return max(float(value), 0.0)
            except ValueError:
                return None
    return None


def deadline_of(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _outcome(fn: Any, *args: Any) -> Any:
    """fn(*args), or the exception it raised (shards end on their own; the caller decides)."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - handed to the caller, which re-raises what it does not handle
        return exc
