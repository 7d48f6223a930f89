"""RolloutClient: the Python client of one or several rollout servers.

`generate` returns the same `RequestOutput` objects as the offline `LLM.generate`. With several
addresses it spreads prompts over the servers (a prompt's n samples stay on one server) and runs
them concurrently. Request ids double as idempotency keys: a retry after UNAVAILABLE attaches to the
request the server already runs, so nothing is generated twice.

Weight updates go through `weight_pusher` (one per client, created on first use), which reaches
every server through `channels` and `metadata` and keeps the distributed group between pushes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rollout.client.boot_ids import BootIds
from rollout.client.generate_call import GenerateCall, Servers, attempts, deadline_of, remaining
from rollout.client.load_balance import LoadBalancer, prompt_cost
from rollout.client.score_call import score_call
from rollout.outputs import RequestOutput
from rollout.protocol import convert
from rollout.protocol.chat_messages import conversation_to_proto, is_conversation, message_chars
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.image_wire import has_images, image_prompt_to_proto
from rollout.sampling_params.sampling_params import SamplingParams, params_or_sampling_params
from rollout.scoring import ScoreOutput, check_sequences, score_params

if TYPE_CHECKING:
    from rollout.client.weight_push import WeightPusher

PromptInput = str | Sequence[int] | Sequence[Mapping[str, Any]] | Mapping[str, Any]  # a dict: with images
_SERVICE = pb.DESCRIPTOR.services_by_name["RolloutService"].full_name
_DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20
# A server that went away (a crash, a restart) is found again within seconds, by this client and by a
# fresh one: each channel owns its connections (gRPC otherwise shares one subchannel per address
# across the process, and a new client inherited its reconnect backoff, which grows to minutes), and
# reconnect attempts are at most 2 s apart.
_RECONNECT_OPTIONS = (
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class RolloutClient:
    """`RolloutClient("127.0.0.1:50051")` or `RolloutClient(["host1:50051", "host2:50051"])`.

    `token`: bearer token sent on every call. `tls`: None/False plaintext, True TLS with the system
    roots, or the path of a PEM root certificate to trust. `timeout`: default deadline (s) per call.
    `max_retries`: retries of a call answered UNAVAILABLE (server starting, paused or draining), or
    RESOURCE_EXHAUSTED with a retry-after hint (past the server's bounds or this caller's share of
    them), with backoff (at least the hint). `caller`: the name the server's fair share and admission
    bounds group calls under; clients that send the same name share one turn and one share (default:
    this client's connection to each server, so all of its calls).
    """

    def __init__(
        self,
        address: str | Sequence[str],
        token: str | None = None,
        tls: bool | str | Path | None = None,
        timeout: float | None = None,
        max_retries: int = 5,
        max_message_bytes: int = _DEFAULT_MAX_MESSAGE_BYTES,
        caller: str | None = None,
    ):
        self.addresses = [address] if isinstance(address, str) else list(address)
        if not self.addresses:
            raise ValueError("address: at least one server address is required")
        self.timeout = timeout
        self.max_retries = max_retries
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        if caller:  # the server's fair share gives all calls of one caller a single turn
            self.metadata += (("rollout-caller", caller),)
        options = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            *_RECONNECT_OPTIONS,
        ]
        self.boot_ids = BootIds()  # which process answered at each address: restarts() counts changes
        self.channels = {a: self.boot_ids.track(a, _channel(a, tls, options)) for a in self.addresses}
        self.stubs = {a: pb_grpc.RolloutServiceStub(c) for a, c in self.channels.items()}
        self._weight_pusher: WeightPusher | None = None
        self.balancer = LoadBalancer(self.addresses)
        self.servers = Servers(self.stubs, self.balancer, self.max_retries, self.metadata)
        self._closed = False

    # ---- generation ---------------------------------------------------------------------------

    def generate(
        self,
        prompts: str | Sequence[PromptInput],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        request_id_prefix: str | None = None,
        timeout: float | None = None,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Every prompt's n samples, in prompt order, samples in index order (as `LLM.generate`).

        A prompt is text, token ids, or chat messages (a list of message objects, each sent whole
        as JSON: tool calls, tool results, names, content parts reach the server's chat template;
        `tools`: tool definitions for the template of every chat prompt). Request ids are
        "<prefix>-<prompt index>"; reusing a prefix returns the earlier results. `params` (or
        vLLM's name, `sampling_params`) may be one SamplingParams per prompt (prompts sharing params
        go in one call, the calls run concurrently, ids "<prefix>-g<group>-<index in group>").
        """
        params = params_or_sampling_params(params, sampling_params)
        if isinstance(prompts, str):
            prompts = [prompts]
        if tools is not None and not any(is_conversation(p) for p in prompts):
            raise ValueError("tools: given, but no prompt is a chat conversation to render them in")
        if params is not None and not isinstance(params, SamplingParams):
            return self._generate_per_prompt(prompts, params, request_id_prefix, timeout, tools)
        params = params or SamplingParams()
        messages = [_prompt_to_proto(p, i, tools) for i, p in enumerate(prompts)]
        results = self._generate_messages(messages, params, timeout, request_id_prefix)
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, str):
                results[i].prompt = prompt
        return results

    def score(
        self,
        token_ids_list: Sequence[Sequence[int]],
        top_logprobs: int | None = None,
        request_id_prefix: str | None = None,
        timeout: float | None = None,
    ) -> list[ScoreOutput]:
        """Teacher-forced logprobs of each sequence, in order, as `LLM.score` (rollout/scoring.py)."""
        self._check_open()
        sequences = check_sequences(token_ids_list)
        score_params(top_logprobs)  # refuses a bad top_logprobs before anything is sent
        deadline = deadline_of(self.timeout if timeout is None else timeout)
        prefix = request_id_prefix or uuid.uuid4().hex
        return score_call(self.servers, sequences, top_logprobs, prefix, deadline)

    def resume_aborted(
        self, outputs: list[RequestOutput], params: SamplingParams, timeout: float | None = None
    ) -> list[RequestOutput]:
        """`outputs` with every aborted sample continued under the server's current weights.

        The other half of an update with in_flight="abort": each partial sample (tokens,
        logprobs, version spans) goes back as a one-sample request that keeps its index; `params`
        are the ones the samples started with, and `max_tokens` counts the tokens they have.
        """
        from rollout.resumption import aborted_samples, merge_resumed, single_sample

        todo = aborted_samples(outputs)
        if not todo:
            return outputs
        messages = [
            pb.Prompt(
                token_ids=pb.TokenIds(ids=job.prompt_token_ids), resume=convert.partial_to_proto(job.partial)
            )
            for job in todo
        ]
        results = self._generate_messages(messages, single_sample(params), timeout)
        return merge_resumed(outputs, todo, [out.outputs[0] for out in results])

    def _generate_messages(
        self,
        messages: list[pb.Prompt],
        params: SamplingParams,
        timeout: float | None,
        request_id_prefix: str | None = None,
    ) -> list[RequestOutput]:
        """One call per address over `messages` (ids "<prefix>-<index>"), results in message order."""
        self._check_open()
        self._revive_dead_servers()
        prefix = request_id_prefix or uuid.uuid4().hex
        for i, message in enumerate(messages):
            message.request_id = f"{prefix}-{i}"
        deadline = deadline_of(self.timeout if timeout is None else timeout)
        costs = [prompt_cost(_prompt_size(m), params.n, params.max_tokens) for m in messages]
        call = GenerateCall(self.servers, convert.params_to_proto(params), params, prefix, deadline)
        return call.run(messages, costs)

    def _revive_dead_servers(self) -> None:
        """Gives a server this client wrote off its work back once a health check finds it serving."""
        for address in self.balancer.due_for_probe():
            if _serving(health_pb2_grpc.HealthStub(self.channels[address]), self.metadata, timeout=0.5):
                self.balancer.revive(address)

    def _generate_per_prompt(
        self,
        prompts: Sequence[PromptInput],
        params: Sequence[SamplingParams],
        request_id_prefix: str | None,
        timeout: float | None,
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[RequestOutput]:
        if len(params) != len(prompts):
            raise ValueError(
                f"params: {len(params)} SamplingParams for {len(prompts)} prompts; give one or one per prompt"
            )
        groups: dict[SamplingParams, list[int]] = {}
        for i, p in enumerate(params):
            groups.setdefault(p, []).append(i)
        prefix = request_id_prefix or uuid.uuid4().hex
        results: list[RequestOutput | None] = [None] * len(prompts)

        def _tools_for(idx: list[int]) -> Sequence[Mapping[str, Any]] | None:
            return tools if any(is_conversation(prompts[i]) for i in idx) else None

        with ThreadPoolExecutor(len(groups), thread_name_prefix="rollout-client") as pool:
            futures = {
                pool.submit(
                    self.generate,
                    [prompts[i] for i in idx],
                    p,
                    f"{prefix}-g{k}",
                    timeout,
                    tools=_tools_for(idx),
                ): idx
                for k, (p, idx) in enumerate(groups.items())
            }
            for future, idx in futures.items():
                for i, output in zip(idx, future.result(), strict=True):
                    results[i] = output
        return results  # type: ignore[return-value]

    @property
    def dead_servers(self) -> dict[str, str]:
        """Servers this client stopped sending prompts to (they stopped answering), with the error.

        Only with several servers: their unfinished prompts went to the others. Weight pushes still
        address every server, so a push fails naming a dead one rather than leaving it silently on
        old weights; a trainer drops it (a new client without it) or restarts it.
        """
        return self.balancer.dead

    # ---- control ------------------------------------------------------------------------------

    def server_info(self, address: str | None = None) -> convert.ServerInfo:
        stub = self.stubs[address or self.addresses[0]]
        return convert.info_from_proto(self._call(stub.GetServerInfo, pb.GetServerInfoRequest()))

    def reset_prefix_cache(self) -> None:
        for stub in self.stubs.values():
            self._call(stub.ResetPrefixCache, pb.ResetPrefixCacheRequest())

    def abort(self, request_id: str) -> bool:
        """Aborts the request on whichever server runs it; False if no server knows it."""
        found = [
            self._call(s.Abort, pb.AbortRequest(request_id=request_id)).found for s in self.stubs.values()
        ]
        return any(found)

    def pause(self, abort_running: bool = False, timeout: float | None = None) -> None:
        """Every server stops admitting and returns once idle (running requests finish or abort)."""
        for stub in self.stubs.values():
            self._call(stub.Pause, pb.PauseRequest(abort_running=abort_running), timeout)

    def resume(self) -> None:
        for stub in self.stubs.values():
            self._call(stub.Resume, pb.ResumeRequest())

    def sleep(self, level: int = 1, abort_running: bool = False, timeout: float | None = None) -> int:
        """vLLM's sleep mode on every server (rpc Sleep); returns the bytes they freed in all."""
        request = pb.SleepRequest(level=level, abort_running=abort_running)
        return sum(self._call(s.Sleep, request, timeout).bytes_freed for s in self.stubs.values())

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Every server takes its memory back: `tags` "weights" and/or "kv_cache" (None: both)."""
        for stub in self.stubs.values():
            self._call(stub.WakeUp, pb.WakeUpRequest(tags=tags or []))

    def is_sleeping(self, address: str | None = None) -> bool:
        stub = self.stubs[address or self.addresses[0]]
        return self._call(stub.IsSleeping, pb.IsSleepingRequest()).is_sleeping

    def metrics(self, address: str | None = None) -> str:
        stub = self.stubs[address or self.addresses[0]]
        return self._call(stub.GetMetrics, pb.GetMetricsRequest()).prometheus_text

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Blocks until every server's health check says SERVING; TimeoutError after `timeout` s.

        A server this client had written off (dead_servers) and found SERVING here gets prompts again."""
        self._check_open()
        deadline = time.monotonic() + timeout
        for address, channel in self.channels.items():
            health = health_pb2_grpc.HealthStub(channel)
            while not _serving(health, self.metadata):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"server {address} not SERVING after {timeout} s")
                time.sleep(0.1)
            self.balancer.revive(address)

    @property
    def weight_pusher(self) -> WeightPusher:
        """Pushes weights to every server; holds the distributed group, so later pushes reuse it.

        `client.weight_pusher.init_group(...)` sets the group up ahead of the first push.
        """
        self._check_open()
        if self._weight_pusher is None:
            from rollout.client.weight_push import WeightPusher  # torch only when weights move

            self._weight_pusher = WeightPusher(self.channels, self.metadata, self.boot_ids)
        return self._weight_pusher

    def update_weights(
        self, model_or_named_tensors: Any, transport: str = "grpc", version: int | None = None, **kwargs: Any
    ) -> int:
        """Pushes weights to every server (see rollout.client.weight_push); returns the new version.

        A PEFT model sends its adapter only (`lora="full"`: base weights too), naming the base each
        server holds as this client last left it (or as loaded); a server holding another refuses it."""
        from rollout.client.weight_push import push_weights

        return push_weights(self, model_or_named_tensors, transport, version, **kwargs)

    def _call(self, method: Any, request: Any, timeout: float | None = None) -> Any:
        """A unary call with the default deadline, retried while the server answers UNAVAILABLE."""
        self._check_open()
        deadline = deadline_of(self.timeout if timeout is None else timeout)
        for attempt in attempts(self.max_retries, deadline):
            try:
                return method(request, timeout=remaining(deadline), metadata=self.metadata)
            except grpc.RpcError as exc:
                if not attempt.retries(exc) or attempt.last:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Closes every channel; the client refuses calls afterwards (gRPC crashes the process on a
        call through a closed channel, so every entry point checks first)."""
        self._closed = True
        for channel in self.channels.values():
            channel.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this RolloutClient is closed; create a new one to reach the servers")

    def __enter__(self) -> RolloutClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prompt_size(message: pb.Prompt) -> int:
    """Tokens a prompt will take, or an upper bound (characters) when the server tokenizes it."""
    kind = message.WhichOneof("prompt")
    if kind == "token_ids":
        return len(message.token_ids.ids)
    if kind == "chat":
        return sum(message_chars(m) for m in message.chat.messages) + len(message.chat.tools_json)
    return len(message.text)


def _prompt_to_proto(prompt: PromptInput, index: int, tools: Sequence[Any] | None = None) -> pb.Prompt:
    if has_images(prompt):  # vLLM's multi_modal_data dicts, chats with image parts (protocol/image_wire.py)
        return image_prompt_to_proto(prompt, f"prompts[{index}]", tools)
    if isinstance(prompt, str):
        return pb.Prompt(text=prompt)
    if is_conversation(prompt):  # each message whole, as JSON: tool calls, names, parts (chat_messages.py)
        return pb.Prompt(chat=conversation_to_proto(prompt, tools, f"prompts[{index}]"))
    if isinstance(prompt, Sequence) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return pb.Prompt(token_ids=pb.TokenIds(ids=list(prompt)))
    raise ValueError(f"prompts[{index}] must be text, a list of token ids or a list of chat messages")


def _channel(address: str, tls: bool | str | Path | None, options: list[tuple[str, int]]) -> grpc.Channel:
    if not tls:
        return grpc.insecure_channel(address, options)
    root = None if tls is True else Path(tls).read_bytes()
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(root), options)


def _serving(
    health: health_pb2_grpc.HealthStub, metadata: tuple[tuple[str, str], ...], timeout: float = 1.0
) -> bool:
    try:
        reply = health.Check(
            health_pb2.HealthCheckRequest(service=_SERVICE), timeout=timeout, metadata=metadata
        )
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING
