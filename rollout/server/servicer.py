"""RolloutServicer: the rollout.v1 RPCs; converts protobuf to engine objects and back, nothing more.

Every RPC goes through the EngineLoop, so concurrent clients share engine steps. Errors map to
status codes that mean what they say (see `_STATUS`); a bad request never reaches the engine.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc

import rollout
from rollout.detokenize.finish_text import finish_text
from rollout.engine.sample.bad_words import with_bad_words_tokenized
from rollout.engine.sleep.engine_memory import SleepModeError
from rollout.multimodal.image_parts import ImageLimits
from rollout.outputs import CompletionOutput
from rollout.protocol import convert
from rollout.protocol.chat_messages import conversation_from_proto
from rollout.protocol.generated import rollout_pb2 as pb
from rollout.protocol.generated import rollout_pb2_grpc as pb_grpc
from rollout.protocol.prompts import (
    NoChatTemplateError,
    text_char_limit,
    tokenize_chat,
    tokenize_text,
)
from rollout.protocol.score_wire import prompt_logprobs_to_proto, score_result_to_proto
from rollout.scoring import score_output, score_params
from rollout.server.admission import AdmissionRefusedError, too_many_prompts
from rollout.server.callers import grpc_caller
from rollout.server.deadlines import deadline_seconds
from rollout.server.engine_loop import EngineLoop
from rollout.server.handle import HandleCancelledError, RequestHandle, Submission
from rollout.server.loop_errors import (
    EngineStepError,
    NotAcceptingError,
    QueueFullError,
    RequestConflictError,
)
from rollout.server.metrics import Metrics
from rollout.server.prompt_images import prompt_images
from rollout.server.retry_after import abort_retry_later
from rollout.server.sleep_control import sleep, sleep_state, wake_up
from rollout.structured_outputs.compile_pool import CompilersBusyError

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["RolloutService"].full_name

# Most specific first: NoChatTemplateError is a ValueError.
_STATUS: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (NoChatTemplateError, grpc.StatusCode.FAILED_PRECONDITION),
    (SleepModeError, grpc.StatusCode.FAILED_PRECONDITION),
    (ValueError, grpc.StatusCode.INVALID_ARGUMENT),
    (QueueFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (NotAcceptingError, grpc.StatusCode.UNAVAILABLE),
    (RequestConflictError, grpc.StatusCode.ALREADY_EXISTS),
    (EngineStepError, grpc.StatusCode.INTERNAL),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
)


def abort_with(context: grpc.ServicerContext, exc: Exception) -> None:
    """Ends the RPC with the status code of `exc`; re-raises anything unexpected (INTERNAL)."""
    if isinstance(exc, (AdmissionRefusedError, CompilersBusyError)):
        abort_retry_later(context, exc)
    for kind, code in _STATUS:
        if isinstance(exc, kind):
            context.abort(code, str(exc))
    raise exc


class RolloutServicer(pb_grpc.RolloutServiceServicer):
    def __init__(
        self, loop: EngineLoop, metrics: Metrics, boot_id: str = "", image_limits: ImageLimits | None = None
    ):
        self.loop = loop
        self.image_limits = image_limits or ImageLimits()  # a prompt's images: count and size
        self.metrics = metrics
        self.boot_id = boot_id
        tokenizer = loop.engine.tokenizer
        self._max_text_chars = (
            None if tokenizer is None else text_char_limit(tokenizer, loop.engine.max_model_len)
        )

    def Generate(
        self, request: pb.GenerateRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.GenerateResponse]:
        handle = self._submit(request, context)
        _cancel_when_done(context, handle)
        index = {r: i for i, r in enumerate(handle.request_ids)}
        sent_prompt: set[str] = set()
        n = handle.submissions[handle.request_ids[0]].params.n
        try:
            for event in handle:
                sub = handle.submissions[event.request_id]
                for sample in self._with_text(event.samples, sub):
                    first = event.request_id not in sent_prompt
                    sent_prompt.add(event.request_id)
                    yield pb.GenerateResponse(
                        request_id=event.request_id,
                        prompt_index=index[event.request_id],
                        sample=convert.sample_to_proto(sample),
                        prompt_token_ids=sub.prompt_token_ids if first else [],
                        num_samples=n,
                        prompt_logprobs=prompt_logprobs_to_proto(event.prompt_logprobs) if first else [],
                        num_cached_tokens=event.num_cached_tokens if first else None,
                    )
        except HandleCancelledError:
            return
        except Exception as exc:
            abort_with(context, exc)

    def GenerateBatch(
        self, request: pb.GenerateBatchRequest, context: grpc.ServicerContext
    ) -> pb.GenerateBatchResponse:
        handle = self._submit(request, context)
        _cancel_when_done(context, handle)
        try:
            outputs = handle.result()
            for output in outputs:
                output.outputs = self._with_text(output.outputs, handle.submissions[output.request_id])
        except HandleCancelledError:
            context.abort(grpc.StatusCode.CANCELLED, "the call was cancelled")
        except Exception as exc:
            abort_with(context, exc)
        return pb.GenerateBatchResponse(results=[convert.result_to_proto(o) for o in outputs])

    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        """Each sequence is a one-token request with prompt logprobs (rollout/scoring.py)."""
        top = request.top_logprobs if request.HasField("top_logprobs") else None
        try:
            params = convert.params_to_proto(score_params(top))
        except ValueError as exc:
            abort_with(context, ValueError(f"top_logprobs: {exc}"))
        prompts = [pb.Prompt(token_ids=seq) for seq in request.sequences]
        batch = pb.GenerateBatchRequest(request_id=request.request_id, prompts=prompts, params=params)
        handle = self._submit(batch, context)
        _cancel_when_done(context, handle)
        try:
            results = [score_output(output, top) for output in handle.result()]
        except HandleCancelledError:
            context.abort(grpc.StatusCode.CANCELLED, "the call was cancelled")
        except Exception as exc:
            abort_with(context, exc)
        return pb.ScoreResponse(results=[score_result_to_proto(r) for r in results])

    def _submit(
        self, request: pb.GenerateRequest | pb.GenerateBatchRequest, context: grpc.ServicerContext
    ) -> RequestHandle:
        try:
            return self.loop.submit(self._submissions(request, grpc_caller(context)))
        except Exception as exc:
            abort_with(context, exc)
            raise  # unreachable: abort_with always raises

    def _submissions(
        self, request: pb.GenerateRequest | pb.GenerateBatchRequest, caller: str
    ) -> list[Submission]:
        if not request.prompts:
            raise ValueError("prompts: at least one prompt is required")
        if len(request.prompts) > self.loop.max_pending_requests:  # before tokenizing any of them
            raise ValueError(too_many_prompts(len(request.prompts), self.loop.max_pending_requests))
        try:
            params = convert.params_from_proto(request.params)
            # bad_words are tokenized here, on the RPC thread: the loop thread never tokenizes
            params = with_bad_words_tokenized(params, self.loop.engine.tokenizer)
        except ValueError as exc:
            raise ValueError(f"params: {exc}") from None
        base_id = request.request_id or uuid.uuid4().hex
        subs = []
        for i, prompt in enumerate(request.prompts):
            try:
                ids, text = self._prompt_ids(prompt)
                mm = prompt_images(
                    self.loop.engine.images, prompt, ids, self.image_limits
                )  # prompt_images.py
                ids = mm.prompt_token_ids if mm is not None else ids
                resume = convert.partial_from_proto(prompt.resume) if prompt.HasField("resume") else None
                self.loop.engine.validate_request(ids, params, resume, multi_modal=mm)
            except ValueError as exc:
                raise type(exc)(f"prompts[{i}]: {exc}") from None
            subs.append(
                Submission(
                    prompt.request_id or f"{base_id}-{i}",
                    ids,
                    params,
                    text,
                    resume=resume,
                    caller=caller,
                    multi_modal=mm,
                )
            )
        return subs

    def _prompt_ids(self, prompt: pb.Prompt) -> tuple[list[int], str | None]:
        tokenizer = self.loop.engine.tokenizer
        kind = prompt.WhichOneof("prompt")
        if kind == "token_ids":
            return list(prompt.token_ids.ids), None
        if kind == "text":
            if not prompt.text:
                raise ValueError("text: the prompt is empty")
            return tokenize_text(tokenizer, prompt.text, self._max_text_chars), prompt.text
        if kind == "chat":
            messages, tools = conversation_from_proto(prompt.chat, images=len(prompt.images) > 0)
            return tokenize_chat(tokenizer, messages, self._max_text_chars, tools)
        raise ValueError("prompt: empty; set token_ids, text or chat")

    def _with_text(self, samples: list[CompletionOutput], sub: Submission) -> list[CompletionOutput]:
        """Each sample's text, cut at its first stop string, made here on the RPC thread (the loop
        thread never tokenizes); new objects, since the loop's cache shares the ones it is given."""
        tokenizer = self.loop.engine.tokenizer
        return [finish_text(s, tokenizer, sub.prompt_token_ids, sub.params) for s in samples]

    def GetServerInfo(
        self, request: pb.GetServerInfoRequest, context: grpc.ServicerContext
    ) -> pb.GetServerInfoResponse:
        engine, stats = self.loop.engine, self.loop.stats()
        info = engine.model_info
        return pb.GetServerInfoResponse(
            model=info.name,
            architecture=info.architecture,
            dtype=info.dtype,
            device=info.device,
            max_model_len=info.max_model_len,
            vocab_size=info.vocab_size,
            eos_token_ids=list(info.eos_token_ids),
            weight_version=int(stats["weight_version"]),
            logprobs_modes=convert.logprobs_modes_proto(),
            block_size=info.block_size,
            num_blocks_total=int(stats["num_blocks_total"]),
            num_blocks_free=int(stats["num_blocks_free"]),
            num_blocks_cached=int(stats["num_blocks_cached"]),
            max_num_seqs=engine.config.max_num_seqs,
            has_tokenizer=engine.tokenizer is not None,
            version=rollout.__version__,
            model_config=engine.model.config.to_json_string(use_diff=False),
            boot_id=self.boot_id,
            prefix_caching=bool(stats["prefix_caching"]),
            state_bytes_per_seq=int(stats["state_bytes_per_seq"]),
            max_state_snapshots=int(stats["max_state_snapshots"]),
            default_logprobs_mode=convert.mode_to_proto(engine.config.logprobs_mode),
        )

    def ResetPrefixCache(
        self, request: pb.ResetPrefixCacheRequest, context: grpc.ServicerContext
    ) -> pb.ResetPrefixCacheResponse:
        self._control(context, lambda: self.loop.call(lambda engine: engine.reset_prefix_cache()))
        return pb.ResetPrefixCacheResponse()

    def Abort(self, request: pb.AbortRequest, context: grpc.ServicerContext) -> pb.AbortResponse:
        return pb.AbortResponse(found=self.loop.abort(request.request_id))

    def Pause(self, request: pb.PauseRequest, context: grpc.ServicerContext) -> pb.PauseResponse:
        timeout = deadline_seconds(context)
        self._control(context, lambda: self.loop.pause(request.abort_running, timeout=timeout))
        return pb.PauseResponse()

    def Resume(self, request: pb.ResumeRequest, context: grpc.ServicerContext) -> pb.ResumeResponse:
        self.loop.resume()
        return pb.ResumeResponse()

    def Sleep(self, request: pb.SleepRequest, context: grpc.ServicerContext) -> pb.SleepResponse:
        level, timeout = request.level or 1, deadline_seconds(context)
        freed = self._answer(context, lambda: sleep(self.loop, level, request.abort_running, timeout))
        return pb.SleepResponse(bytes_freed=freed)

    def WakeUp(self, request: pb.WakeUpRequest, context: grpc.ServicerContext) -> pb.WakeUpResponse:
        tags = list(request.tags) or None
        self._answer(context, lambda: wake_up(self.loop, tags, deadline_seconds(context)))
        return pb.WakeUpResponse()

    def IsSleeping(
        self, request: pb.IsSleepingRequest, context: grpc.ServicerContext
    ) -> pb.IsSleepingResponse:
        state = self._answer(context, lambda: sleep_state(self.loop, deadline_seconds(context)))
        return pb.IsSleepingResponse(
            is_sleeping=state.is_sleeping,
            level=state.level,
            sleeping_tags=state.sleeping_tags,
            awaiting_weights=state.awaiting_weights,
        )

    def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.ServicerContext
    ) -> pb.GetMetricsResponse:
        return pb.GetMetricsResponse(prometheus_text=self.metrics.render())

    def _control(self, context: grpc.ServicerContext, action) -> None:
        self._answer(context, action)

    def _answer(self, context: grpc.ServicerContext, action):  # noqa: ANN202 - action's result
        try:
            return action()
        except Exception as exc:
            abort_with(context, exc)


def _cancel_when_done(context: grpc.ServicerContext, handle: RequestHandle) -> None:
    """Cancels `handle` when the RPC ends (cancel, disconnect, deadline, normal end).

    gRPC refuses the callback of an RPC that already ended, e.g. a client that left while the request
    was being submitted; the handle is cancelled at once then, or its request would run to the end.
    """
    if not context.add_callback(handle.cancel):
        handle.cancel()
